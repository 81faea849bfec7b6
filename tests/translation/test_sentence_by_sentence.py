"""A note is generated sentence by sentence, each sentence with its own
examples, and streamed in order as one translation: one event stream, one
row with the figures of all its requests (clinical/translation/generation.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.db import database_sync_to_async

from clinical.models import Translation
from clinical.translation import admission, stream
from clinical.translation.generation import translation_generate
from inference.base import GenerationParams
from inference.examples import cluster_prefix_messages, default_router, note_sentences
from inference.fake_engine import FakeEngine
from inference.llamacpp_engine import LlamaCppEngine
from inference.parts import translation_parts
from inference.weights import smollm2_gguf_path
from tests.data import laymaker_sentences

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "There is 1+ pretibial edema.\nABDOMEN : Soft, nontender. No calf tenderness."
SENTENCES = ["There is 1+ pretibial edema.", "ABDOMEN : Soft, nontender.", "No calf tenderness."]


async def create(user, text: str) -> Translation:
    return await database_sync_to_async(admission.translation_create)(user=user, text=text)


async def events_of(translation: Translation, engine) -> list[stream.TranslationEvent]:
    return [event async for event in stream.translation_events(
        translation=translation, engine=engine, received_ns=time.monotonic_ns())]


async def test_a_note_streams_its_sentences_in_order_as_one_translation(clinician, settings):
    settings.PROMPT_HEADINGS = False  # the heading goes to the model with its findings (copied: the test below)
    engine = FakeEngine()  # echoes "Plain words: <the sentence>": each sentence's text is recognisable
    row = await create(clinician, NOTE)
    events = await events_of(row, engine)
    kinds = [e.kind for e in events]
    assert kinds[0] == stream.STARTED and kinds[-1] == stream.DONE and set(kinds[1:-1]) == {stream.TOKEN}
    streamed = "".join(e.text for e in events if e.kind == stream.TOKEN)
    assert streamed == ("Plain words: There is 1+ pretibial edema.\nPlain words: ABDOMEN : Soft, nontender. "
                        "Plain words: No calf tenderness.")
    done = events[-1].translation
    assert done.output_text == streamed and done.status == Translation.Status.COMPLETED
    request_id = str(row.request_id)
    assert engine.admitted[:3] == [request_id, f"{request_id}-2", f"{request_id}-3"]  # one after another
    assert done.tokens_in == sum(len(s.split()) for s in SENTENCES)  # the fake engine's prompt size, summed
    assert done.tokens_out == len(streamed.split()) and done.finish_reason == "stop"
    assert done.confidence == pytest.approx(0.951, abs=1e-3)  # exp(-0.05) over every token
    assert await database_sync_to_async(Translation.objects.count)() == 1


async def test_a_copied_heading_streams_before_the_answer_to_its_findings(clinician, settings):
    from inference.parts import translation_parts_join

    settings.PROMPT_HEADINGS, settings.PROMPT_HINTS = True, False
    row = await create(clinician, NOTE)
    events = await events_of(row, FakeEngine())
    tokens = [e.text for e in events if e.kind == stream.TOKEN]
    streamed = "".join(tokens)
    assert streamed == ("Plain words: There is 1+ pretibial edema.\nABDOMEN : Plain words: Soft, nontender. "
                        "Plain words: No calf tenderness.")
    # The heading as written, in the frame of its answer's first token: every frame carries model text.
    assert [t for t in tokens if "ABDOMEN" in t] == ["\nABDOMEN : Plain"]
    done = events[-1].translation
    assert done.output_text == streamed and done.tokens_out == len(tokens)
    answers = [" Plain words: There is 1+ pretibial edema.", "Plain words: Soft, nontender. \n",
               "Plain words: No calf tenderness."]
    assert translation_parts_join(translation_parts(row), answers) == streamed  # the re-run joins the same way
    assert translation_parts_join(translation_parts(row), ["Edema.", "", "No."]) == "Edema. No."  # no answer, no heading


async def test_sentences_of_one_line_keep_their_boundary_when_an_answer_drops_its_period(clinician, settings):
    """The model often ends a sentence without its period and starts the
    next in lower case: the joined text gets the period and the capital
    ("not painful. No pain"), not "not painful no pain"; a line break or a
    comma is left as written."""
    from inference.parts import translation_parts_join

    settings.PROMPT_HEADINGS, settings.PROMPT_HINTS = True, False
    parts = translation_parts(await create(clinician, NOTE))
    assert translation_parts_join(parts, ["swelling of the shins", "soft, not painful", "no pain in the calves"]) \
        == "Swelling of the shins\nABDOMEN : soft, not painful. No pain in the calves"
    assert translation_parts_join(parts, ["swelling.", "soft.", "no pain."]) == "Swelling.\nABDOMEN : soft. No pain."
    assert translation_parts_join(parts, ["swelling", "soft,", "no pain"]) == "Swelling\nABDOMEN : soft, no pain"
    assert translation_parts_join(parts, ["swelling", "it is \"soft\"", "no pain"]) == \
        'Swelling\nABDOMEN : it is "soft". No pain'
    assert translation_parts_join(parts, ["swelling.", "soft.", "pH normal."]) == "Swelling.\nABDOMEN : soft. pH normal."


async def test_the_text_and_each_line_start_with_a_capital_but_a_copied_heading_keeps_its_finding_as_written(
        clinician, settings):
    """The model often starts lower case, as the clinicians' rewrites in its
    examples do: the text a patient reads starts with a capital, and so
    does a line; after a copied heading ("ABDOMEN : soft") the finding is
    left as written, and a first word with a capital or digit ("pH") too."""
    from inference.parts import line_start_capitalized, translation_parts_join

    settings.PROMPT_HEADINGS, settings.PROMPT_HINTS = False, False
    parts = translation_parts(await create(clinician, "Bilateral pretibial edema.\nNo calf tenderness."))
    assert [part.separator for part in parts] == ["", "\n"]
    assert translation_parts_join(parts, ["the shins are swollen.", "the calves are not sore."]) \
        == "The shins are swollen.\nThe calves are not sore."
    assert translation_parts_join(parts, ["pH is normal.", "x2 daily."]) == "pH is normal.\nx2 daily."
    assert line_start_capitalized("  the") == "  the"  # only a text that starts with the word
    assert line_start_capitalized("\"left alone\"") == "\"left alone\""


def test_a_first_word_streamed_in_fragments_keeps_its_capital_and_digit():
    """The engine may send "pH" as "p" then "H": a lower-case start is held
    until its word ends, so neither the text's start nor a sentence after
    another on the same line becomes "PH"; a held one-word answer is
    streamed when it ends."""
    from inference.parts import TextJoiner

    joiner = TextJoiner()
    joiner.begin("")
    assert [joiner.feed(piece) for piece in (" p", "H", " is", " normal.")] == ["", "pH", " is", " normal."]
    joiner.begin(" ")
    assert [joiner.feed(piece) for piece in ("m", "L", " given.")] == ["", " mL", " given."]
    joiner.begin("\n")
    assert [joiner.feed(piece) for piece in ("the", " dose")] == ["", "\nThe dose"]
    joiner.begin(" ")
    assert (joiner.feed("stable"), joiner.end(), joiner.end()) == ("", ". Stable", "")
    assert joiner.text == "pH is normal. mL given.\nThe dose. Stable"


async def test_a_one_word_answer_is_streamed_and_stored_with_its_capital(clinician):
    seen: list[str] = []

    async def on_token(text: str) -> None:
        seen.append(text)

    row = await create(clinician, "Stable.")
    done = await translation_generate(translation=row, engine=FakeEngine(answer="stable"),
                                      received_ns=time.monotonic_ns(), on_token=on_token)
    assert seen == ["Stable"] and done.output_text == "Stable"


async def test_a_sentence_cut_at_the_token_limit_makes_the_translation_length(clinician):
    row = await create(clinician, "There is 1+ pretibial edema. Stable.")
    done = await translation_generate(translation=row, engine=FakeEngine(), received_ns=time.monotonic_ns(),
                                      max_tokens=4)
    # "Plain words: There is" hit the limit, which an ellipsis marks; "Plain words: Stable." (3 tokens)
    # stopped on its own.
    assert done.output_text == "Plain words: There is\u2026 Plain words: Stable."
    assert done.finish_reason == "length" and done.tokens_out == 7


async def test_cancelling_in_the_second_sentence_stops_it_and_keeps_the_first(clinician, settings):
    settings.PROMPT_HEADINGS = False
    engine = FakeEngine(token_delay_s=0.02)
    row = await create(clinician, NOTE)
    seen: list[str] = []

    async def on_token(text: str) -> None:
        seen.append(text)

    task = asyncio.create_task(translation_generate(translation=row, engine=engine, on_token=on_token,
                                                    received_ns=time.monotonic_ns()))
    while "ABDOMEN" not in "".join(seen):
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    done = await database_sync_to_async(Translation.objects.get)(pk=row.pk)
    assert done.status == Translation.Status.CANCELLED and done.finish_reason == "abort"
    assert done.output_text.startswith("Plain words: There is 1+ pretibial edema.\nPlain words: ABDOMEN")
    assert "calf" not in done.output_text
    assert f"{row.request_id}-2" in engine.aborted and f"{row.request_id}-3" not in engine.admitted


def same_cluster_sentences(router, count: int, other_than: int | None = None) -> tuple[int, list[str]]:
    """``count`` laymaker sentences that route to one cluster (not
    ``other_than``) and are none of its fixed examples (so they share its
    prefix exactly)."""
    groups: dict[int, list[str]] = {}
    for sentence in laymaker_sentences():
        cluster, fixed = router.route(sentence)
        if cluster != other_than and len(fixed) == len(router.fixed[cluster]) and len(note_sentences(sentence)) == 1:
            groups.setdefault(cluster, []).append(sentence)
    cluster, sentences = max(groups.items(), key=lambda item: len(item[1]))
    return cluster, sentences[:count]


@pytest.fixture
async def smollm():
    # One thread: llama.cpp's threads spin, and on a machine shared with
    # other work two of them ran ten times slower than one.
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1", n_threads=1)
    await engine.start()
    yield engine
    await engine.shutdown()


async def test_a_note_on_the_real_engine_is_one_row_with_summed_tokens_and_one_prefix_read(clinician, smollm,
                                                                                          settings):
    """Two sentences of one cluster (SmolLM2 through llama.cpp): their
    shared prefix is read once; the row counts both requests' tokens."""
    settings.MAX_OUTPUT_TOKENS = 48
    _, (first, second) = same_cluster_sentences(default_router(24, 8), 2)
    row = await create(clinician, f"{first} {second}")
    parts = translation_parts(row)
    assert len(parts) == 2 and parts[0].messages[:-1] == parts[1].messages[:-1]
    evaluated = smollm.prefix_evaluations
    events = await events_of(row, smollm)
    assert smollm.prefix_evaluations == evaluated + 1  # the second sentence reused the first's prefix
    done = events[-1].translation
    assert events[-1].kind == stream.DONE
    assert "".join(e.text for e in events if e.kind == stream.TOKEN) == done.output_text != ""
    prompt_sizes = []
    for index, part in enumerate(parts):
        async for delta in smollm.generate(f"size-{index}", part.messages, GenerationParams(max_tokens=1)):
            if delta.prompt_tokens is not None:
                prompt_sizes.append(delta.prompt_tokens)
    assert done.tokens_in == sum(prompt_sizes) and len(prompt_sizes) == 2
    assert done.tokens_out >= 2 and 0 < done.confidence <= 1
    assert 0 < done.ttft_ms <= done.total_ms


async def test_the_warm_up_leaves_each_cluster_prefix_for_the_first_clinician(clinician, smollm, settings):
    """After the warm-up a clinician's sentence finds its cluster's prefix
    in a snapshot: nothing of it is read in the request."""
    from clinical.translation.engine import _warm_cluster_prefixes

    settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES = 6, 4
    router = default_router(6, 4)
    evaluated = smollm.prefix_evaluations
    assert await _warm_cluster_prefixes(smollm) == 6
    assert smollm.prefix_evaluations == evaluated + 6 and len(smollm.prefix_snapshots) >= 6
    last_warmed = max(range(6), key=lambda c: (-router.sizes[c], c))
    cluster, (sentence,) = same_cluster_sentences(router, 1, other_than=last_warmed)
    row = await create(clinician, sentence)
    assert translation_parts(row)[0].messages[:-1] == cluster_prefix_messages(cluster, router=router)[:-1]
    restored = smollm.prefix_snapshots.restored
    done = await translation_generate(translation=row, engine=smollm, received_ns=time.monotonic_ns(), max_tokens=8)
    assert done.status == Translation.Status.COMPLETED and done.tokens_out >= 1
    assert smollm.prefix_evaluations == evaluated + 6  # nothing read again:
    assert smollm.prefix_snapshots.restored == restored + 1  # the cluster's prefix came back from its snapshot


async def test_the_parts_joined_for_a_rerun_are_the_text_the_fast_run_stored(clinician, settings):
    """A re-run that generates each part joins the answers as the fast run
    streamed them (inference.parts.translation_parts_join)."""
    settings.PROMPT_HEADINGS = False
    from inference.parts import translation_parts_join

    engine = FakeEngine()
    row = await create(clinician, NOTE)
    done = await translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns())
    answers = [" Plain words: " + s + " \n" for s in SENTENCES]  # the echo, with stray whitespace
    assert translation_parts_join(translation_parts(row), answers) == done.output_text
    assert translation_parts_join(translation_parts(row), ["", answers[1], " "]) == \
        "Plain words: ABDOMEN : Soft, nontender."
