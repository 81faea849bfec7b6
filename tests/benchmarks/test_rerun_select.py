"""``python -m bench rerun_select`` replays the product's selection rules
over the same candidates: the incumbent keeps a passing fast text that no
candidate beats by the margin, and the rule before it does not."""

from __future__ import annotations

import math

from bench.rerun_select import replay
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
