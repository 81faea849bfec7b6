"""Sentence by sentence, through the server ``make run`` starts (Daphne,
the fake engine): a doubted sentence and a flagged word are marked where
they stand in the text, in a real browser; the API returns the sentence
list with offsets that point at the flagged words; replacing a sentence by
the diagnosis as written updates the handout and writes one audit event
(clinical/translation/alignment.py, clinical/web/sentence_view.py,
static/clinical/sentences.js)."""

from __future__ import annotations

import re
import time

import httpx
from playwright.sync_api import expect

from clinical.models import APIClient, AuditEvent, Translation, TranslationEdit
from tests.conftest import in_worker_thread
from tests.live.test_clinician_ui import assert_accessible, log_in, ui_page  # noqa: F401 - a fixture

NOTE = "Mild left knee effusion. No fracture is seen."
#: The fake engine's answer to every sentence: the wrong side, and the
#: negation lost; the model's own check answers 0.3, under the site's 0.6.
ANSWER = "Your right knee has some extra fluid."
DOUBTING = {"INFERENCE_ENGINE": "fake", "FAKE_ENGINE_ANSWER": ANSWER, "FAKE_ENGINE_SELF_CHECK": "0.3",
            "SELF_CHECK_THRESHOLD": "0.6"}


def test_the_page_marks_the_doubted_sentences_and_the_flagged_word_where_they_stand(daphne_server, clinician,
                                                                                   ui_page):  # noqa: F811
    server = daphne_server(**DOUBTING)
    page = ui_page
    log_in(page, server, clinician.username)
    page.get_by_label("Diagnosis text").fill(NOTE)
    page.get_by_role("button", name="Translate").click()
    output = page.locator("#output")
    expect(output.locator(".sentence-doubted")).to_have_count(2)
    row = in_worker_thread(lambda: Translation.objects.get())
    assert output.evaluate("node => node.textContent") == row.output_text  # the marks add no character

    flags = output.locator("mark.mark-flag")
    expect(flags).to_have_text(["right", "right"])
    flag = flags.first
    described = page.locator("#" + flag.get_attribute("aria-describedby"))
    expect(described).to_have_text(re.compile(r"^Faithfulness check: side \(left/right\), .+"))
    flag.focus()  # keyboard reachable; its why shows on focus
    assert "Faithfulness check" in page.evaluate(
        "() => getComputedStyle(document.activeElement, '::after').content")
    doubted = output.locator(".sentence-doubted").first
    expect(page.locator("#" + doubted.get_attribute("aria-describedby"))).to_have_text(
        re.compile(r"^Sentence 1: The model.s own check doubts"))

    table = page.locator("#sentences-slot")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator("tbody td.sentence-source")).to_have_text(["Mild left knee effusion.",
                                                                    "No fracture is seen."])
    expect(table.locator(".status-badge")).to_have_text(["Doubted", "Doubted"])
    expect(table.locator("tbody tr").first.locator("mark.mark-lost")).to_have_text(["left"])
    expect(table.locator("tbody tr").nth(1).locator("mark.mark-lost").first).to_be_visible()
    assert_accessible(page, "main page with marks")

    page.goto(server.base_url + f"/translations/{row.request_id}/")  # the translation's own page
    expect(page.locator("#output .sentence-doubted")).to_have_count(2)
    expect(page.locator("#sentences-slot tbody tr")).to_have_count(2)
    assert_accessible(page, "translation page with marks")


def test_the_api_returns_each_sentence_with_offsets_at_its_flagged_words(daphne_server):
    server = daphne_server(**DOUBTING)
    _, key = in_worker_thread(lambda: APIClient.objects.create_key(name="ehr-sentences"))
    client = httpx.Client(base_url=server.base_url + "/api", timeout=60, headers={"Authorization": f"Bearer {key}"})
    body = client.post("/v1/translations/", json={"text": NOTE}).json()
    text = body["text"]
    assert [s["source"]["text"] for s in body["sentences"]] == ["Mild left knee effusion.", "No fracture is seen."]
    for sentence in body["sentences"]:
        source, plain = sentence["source"], sentence["plain"]
        assert NOTE[source["start"]:source["end"]] == source["text"]
        assert text[plain["start"]:plain["end"]] == plain["text"] == ANSWER
        assert sentence["status"] == "doubted" and sentence["p_yes"] == 0.3
        assert [(f["kind"], text[f["start"]:f["end"]]) for f in sentence["flags"]] == [("laterality", "right")]
    lost = body["sentences"][0]["missing"]
    assert ("laterality", "left") in [(m["kind"], NOTE[m["start"]:m["end"]]) for m in lost]
    schema = client.get("/schema/", headers={"Accept": "application/vnd.oai.openapi+json"}).json()
    assert "sentences" in schema["components"]["schemas"]["Translation"]["properties"]


def test_a_sentence_replaced_by_the_diagnosis_as_written_updates_the_handout_and_the_audit_log(
        daphne_server, clinician, ui_page):  # noqa: F811
    server = daphne_server(**DOUBTING)
    page = ui_page
    log_in(page, server, clinician.username)
    page.get_by_label("Diagnosis text").fill(NOTE)
    page.get_by_role("button", name="Translate").click()
    expect(page.locator("#sentences-slot tbody tr")).to_have_count(2)
    page.get_by_role("link", name=re.compile("Patient handout")).click()
    rows = page.locator("#handout-sentences-slot tbody tr")
    expect(rows).to_have_count(2)
    assert_accessible(page, "handout with sentence actions")
    before = in_worker_thread(lambda: AuditEvent.objects.filter(event_type="handout_edit").count())

    rows.first.get_by_role("button", name="Use as written").click()
    expect(page.locator("#handout-status")).to_have_text("Sentence 1 is now the diagnosis as written.")
    expect(page.locator("#handout-text")).to_have_text(f"Mild left knee effusion. {ANSWER}")
    events = in_worker_thread(lambda: list(AuditEvent.objects.filter(event_type="handout_edit")))
    assert len(events) == before + 1
    assert events[0].handout_change == {"action": "as_written", "sentences": [1]}
    edit = in_worker_thread(lambda: TranslationEdit.objects.get())
    assert edit.text_sha256 == events[0].text_sha256 and "knee" not in str(events[0].handout_change)

    page.locator("#handout-sentences-slot tbody tr").nth(1).get_by_role("button", name="Keep").click()
    expect(page.locator("#handout-status")).to_contain_text("Sentence 2 is kept")
    kept = in_worker_thread(lambda: AuditEvent.objects.filter(event_type="handout_edit").first())
    assert kept.outcome == "kept" and kept.handout_change == {"action": "keep", "sentences": [2]}
    assert in_worker_thread(lambda: TranslationEdit.objects.count()) == 1  # the handout did not change


def test_a_term_given_a_lay_word_outside_the_vocabulary_is_flagged_and_rerun_to_the_vetted_words(
        daphne_server, celery_worker_process):
    """The fast text says the fluid is in the lung; HPO says "fluid around
    lungs". The safety check's lay_term finding sends it to a real worker,
    whose span candidate keeps the term and explains it in the
    vocabulary's words."""
    wrong = "The chest x-ray shows a small amount of fluid in the left lung."
    env = {"FAKE_ENGINE_ANSWER": wrong, "FAKE_ENGINE_SELF_CHECK": "0.9", "SELF_CHECK_THRESHOLD": "0.6",
           "RERUN_CANDIDATES": "full_precision,span_replacement"}
    celery_worker_process(RERUN_ENGINE="fake", **env)
    server = daphne_server(INFERENCE_ENGINE="fake", **env)
    _, key = in_worker_thread(lambda: APIClient.objects.create_key(name="ehr-lay-term"))
    client = httpx.Client(base_url=server.base_url + "/api", timeout=60, headers={"Authorization": f"Bearer {key}"})
    created = client.post("/v1/translations/", json={"text": "Chest x-ray shows a small left pleural effusion."})
    body = created.json()
    assert body["text"] == wrong and body["rerun_reason"] == "safety_failed"
    assert body["safety"]["missing"] == [{"kind": "lay_term", "text": "pleural effusion"}]
    [lost] = body["sentences"][0]["missing"]
    assert (lost["kind"], "Chest x-ray shows a small left pleural effusion."[lost["start"]:lost["end"]]) == (
        "lay_term", "pleural effusion")
    deadline = time.monotonic() + 120
    while body["verification"] in ("pending", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
        body = client.get(created.headers["Location"].removeprefix("/api")).json()
    assert body["verified"], body
    assert "pleural effusion (fluid around lungs)" in body["text"] and body["verified_quality"]["safety"]["passed"]
    [sentence] = body["sentences"]
    assert sentence["status"] == "rerun" and sentence["reasons"] == ["safety_failed"]


def test_a_spanish_text_that_misses_the_vetted_spanish_term_is_flagged_and_gated(daphne_server):
    """"constipado" is a cold, not constipation: HPO's Spanish label is
    "Estreñimiento". Through the server, the Spanish text is held to the
    label, the finding points at the diagnosis's words and the text goes to
    the re-run."""
    wrong = "Usted dice que está constipado desde hace dos semanas."
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_ANSWER=wrong, FAKE_ENGINE_SELF_CHECK="0.9",
                           SELF_CHECK_THRESHOLD="0.6")
    _, key = in_worker_thread(lambda: APIClient.objects.create_key(name="ehr-spanish-term"))
    client = httpx.Client(base_url=server.base_url + "/api", timeout=60, headers={"Authorization": f"Bearer {key}"})
    note = "The patient reports constipation for two weeks."
    body = client.post("/v1/translations/", json={"text": note, "language": "es"}).json()
    assert body["text"] == wrong and body["rerun_reason"] == "safety_failed", body
    assert body["safety"]["missing"] == [{"kind": "lay_term", "text": "constipation"}]
    [lost] = body["sentences"][0]["missing"]
    assert (lost["kind"], note[lost["start"]:lost["end"]]) == ("lay_term", "constipation")
    row = in_worker_thread(lambda: Translation.objects.get(request_id=body["id"]))
    assert row.prompt_version == "2026-11-29.1" and row.language == "es"
