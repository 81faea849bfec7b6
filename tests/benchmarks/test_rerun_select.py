"""``python -m bench rerun_select`` replays the product's selection rules
over the same candidates: the incumbent keeps a passing fast text that no
candidate beats by the margin, and the rule before it does not."""

from __future__ import annotations

import math

from bench.rerun_select import replay, replay_checked
from clinical.models import Translation
from clinical.rerun import candidates

KNEE = "Mild left knee effusion."
FAST = "There is a little extra fluid in your left knee."


def measured(name: str, text: str, confidence: float, ms: float = 1000.0) -> candidates.Candidate:
    translation = Translation(input_text=KNEE, language="en", reading_level=6)
    return candidates.candidate_measure(translation=translation, name=name, text=text,
                                        logprobs=[math.log(confidence)] * 8, ms=ms, prompt_version="test")


def test_the_incumbent_keeps_the_fast_text_that_the_rule_before_it_replaced(settings):
    settings.CONFIDENCE_THRESHOLD = 0.85
    tried = [measured(candidates.FULL_PRECISION, FAST, 0.50),
             measured(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.52)]
    common = {"fast_text": FAST, "fast_confidence": 0.50, "model_name": "x.gguf", "reading_level": 6}
    assert replay(tried, fast_failed=False, margin=None, **common) == ("Some fluid in the left knee.",
                                                                       "retrieved_examples", 2000.0)
    assert replay(tried, fast_failed=False, margin=0.05, **common) == (FAST, "full_precision", 2000.0)
    assert replay(tried, fast_failed=False, margin=0.0, **common)[1] == "retrieved_examples"
    # a fast text that failed a check has no incumbent: the rule before it applies
    assert replay(tried, fast_failed=True, margin=math.inf, **common)[1] == "retrieved_examples"


def test_an_early_stop_the_incumbent_allows_leaves_the_later_candidates_ungenerated(settings):
    settings.CONFIDENCE_THRESHOLD = 0.85
    tried = [measured(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.95, ms=500.0),
             measured(candidates.SAMPLED, "A bit of fluid in the left knee.", 0.90, ms=700.0)]
    text, name, spent = replay(tried, fast_text=FAST, fast_confidence=0.5, fast_failed=False, margin=0.05,
                               model_name="x.gguf", reading_level=6)
    assert (name, spent) == ("retrieved_examples", 500.0)
    text, name, spent = replay(tried, fast_text=FAST, fast_confidence=0.5, fast_failed=False, margin=math.inf,
                               model_name="x.gguf", reading_level=6)
    assert (text, name, spent) == (FAST, "fast", 1200.0)


def checked(name: str, text: str, p_yes: float, ms: float = 1000.0) -> candidates.Candidate:
    translation = Translation(input_text=KNEE, language="en", reading_level=6)
    return candidates.candidate_measure(translation=translation, name=name, text=text, logprobs=[-0.1] * 8,
                                        ms=ms, prompt_version="test", self_check=p_yes,
                                        replaced=[("effusion", "extra fluid")]
                                        if name == candidates.SPAN_REPLACEMENT else None)


def test_a_doubted_text_gives_way_to_a_trusted_copy_under_the_products_rule_and_the_trusted_first_ones():
    copy = "Mild left knee extra fluid."
    tried = [checked(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.40),
             checked(candidates.SPAN_REPLACEMENT, copy, 0.90),
             checked(candidates.SAMPLED, "Mild left knee effusion.", 0.95)]  # the input again: tier 0
    common = {"fast_text": FAST, "fast_confidence": 0.9, "fast_self_check": 0.3, "reasons": ["low_self_check"],
              "threshold": 0.6, "model_name": "x.gguf"}
    # before: the model-written text ranks first though the model doubts it (0.40 > the fast text's 0.30)
    assert replay_checked(tried, **common) == ("Some fluid in the left knee.", "retrieved_examples", 0.40)
    # today's product: the input unchanged, trusted, replaces it
    assert replay_checked(tried, copy_fallback=True, **common) == (KNEE, "sampled", 0.95)
    assert replay_checked(tried, trusted_tiers=(1,), **common) == (copy, "span_replacement", 0.90)
    assert replay_checked(tried, trusted_tiers=(1, 0), **common) == (copy, "span_replacement", 0.90)
    # a trusted model-written text stops the search and is kept by every rule
    trusted = [checked(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.70)] + tried[1:]
    assert replay_checked(trusted, trusted_tiers=(1, 0), **common)[1] == "retrieved_examples"
    assert replay_checked(trusted, copy_fallback=True, **common)[1] == "retrieved_examples"
    # the copy alone is trusted: only the rules that allow it deliver it
    no_span = [tried[0], tried[2]]
    assert replay_checked(no_span, trusted_tiers=(1,), **common)[1] == "retrieved_examples"
    assert replay_checked(no_span, trusted_tiers=(1, 0), **common)[1] == "sampled"


def test_a_text_still_doubted_after_the_trusted_copy_gives_way_to_the_diagnosis_as_written():
    doubted = [checked(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.40),
               checked(candidates.SAMPLED, "A bit of fluid in the left knee.", 0.35)]
    common = {"fast_text": FAST, "fast_confidence": 0.9, "fast_self_check": 0.3, "reasons": ["low_self_check"],
              "threshold": 0.6, "model_name": "x.gguf", "copy_fallback": True}
    assert replay_checked(doubted, **common) == ("Some fluid in the left knee.", "retrieved_examples", 0.40)
    assert replay_checked(doubted, as_written=True, **common) == (KNEE, "as_written", None)
    # a trusted text is kept: nothing to replace
    trusted = [checked(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.70)]
    assert replay_checked(trusted, as_written=True, **common)[1] == "retrieved_examples"
