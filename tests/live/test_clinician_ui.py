"""The clinician's page in a real browser (Debian's chromium, Playwright)
against a real Daphne: streaming into a live region, the quality panels,
the patient handout (print view, copy, edit), the history, keyboard-only
use, and an axe-core check (WCAG 2.2 AA tags) of every page."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect, sync_playwright

from clinical.models import AuditEvent, Translation, TranslationEdit
from clinical.quality.glossary import glossary_display
from inference.weights import smollm2_gguf_path
from tests.conftest import PASSWORD, ROOT, browser_messages, in_worker_thread, print_page_if_failed
from tests.data import laymaker_sentences

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "var" / "screenshots"
# axe-core rule tags: WCAG 2.0/2.1/2.2 A and AA, plus axe's best practices.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by scripts/setup.sh")


@pytest.fixture
def ui_page(request):
    """A chromium page (1280x900) that may use the clipboard; fails the test
    on any Content-Security-Policy violation."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        messages = browser_messages(page)
        yield page
        print_page_if_failed(request, page, messages)
        browser.close()
    assert not [m for m in messages if "Content Security Policy" in m], messages


def log_in(page, server, username: str) -> None:
    """Warm the engine and its word lists (GET /readyz), then log in
    through the login form."""
    assert httpx.get(server.base_url + "/readyz", timeout=180).status_code == 200
    page.goto(server.base_url + "/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Explain a diagnosis to a patient")).to_be_visible()


def assert_accessible(page, name: str) -> None:
    """axe-core on the page as it is now: print every violation, fail on a
    serious or critical one."""
    results = Axe().run(page, options={"runOnly": {"type": "tag", "values": AXE_TAGS},
                                       "resultTypes": ["violations"]})
    violations = results.response["violations"]
    rules_run = len(results.response["passes"]) + len(violations)
    assert rules_run >= 20, f"axe ran only {rules_run} rules on {name}"
    for violation in violations:
        print(f"axe [{name}] {violation['impact']}: {violation['id']} - {violation['help']} "
              f"at {[node['target'] for node in violation['nodes']][:5]}")
    serious = [v["id"] for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, f"{name}: serious or critical accessibility violations {serious}"


def watch_output(page) -> None:
    """Record the output's length and aria-busy at every change."""
    page.evaluate("""() => {
        const output = document.getElementById('output');
        window.__outputLog = [];
        new MutationObserver(() => window.__outputLog.push(
                [output.textContent.length, output.getAttribute('aria-busy')]))
            .observe(output, {childList: true, characterData: true, subtree: true});
    }""")


def db(function, *args):
    return in_worker_thread(function, *args)


def test_clinician_translates_prints_edits_and_finds_a_handout(
        daphne_server, clinician, other_clinician, ui_page):
    """The main path with a real model (SmolLM2 through llama.cpp)."""
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()))
    page = ui_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
    sentence = laymaker_sentences()[17]
    theirs = db(lambda: Translation.objects.create(
        user=other_clinician, input_text=sentence, output_text="Someone else's patient.",
        status=Translation.Status.COMPLETED))
    log_in(page, server, clinician.username)
    assert_accessible(page, "main page")

    page.get_by_label("Diagnosis text").fill(sentence)
    watch_output(page)
    page.get_by_role("button", name="Translate").click()
    status = page.locator("#status")
    expect(status).to_have_text(re.compile(r"^Done\. The explanation is complete"), timeout=90_000)

    # Tokens streamed in: the text grew in several steps while the live
    # region was marked busy, and it is not busy now.
    log = page.evaluate("window.__outputLog")
    growing = [length for length, busy in log if busy == "true" and length > 0]
    assert len(set(growing)) >= 3 and growing == sorted(growing), log[:20]
    output = page.locator("#output")
    expect(output).to_have_attribute("aria-live", "polite")
    expect(output).to_have_attribute("aria-busy", "false")
    expect(output).to_have_attribute("lang", "en")
    row = db(lambda: Translation.objects.get(user=clinician))
    assert row.status == Translation.Status.COMPLETED
    assert output.inner_text().strip() == row.output_text

    # Reading level of input and output, and the safety panel, as stored.
    expect(page.locator("#q-input")).to_have_text(f"grade {row.input_fkgl:.1f} (FKGL)")
    expected_output = ("not measured (no words)" if row.output_fkgl is None else f"grade {row.output_fkgl:.1f}")
    expect(page.locator("#q-output")).to_have_text(f"{expected_output} (FKGL; asked for grade 6)")
    safety = page.locator("#safety")
    expect(safety).to_be_visible()
    expect(safety).to_have_attribute("data-state", "passed" if row.safety_passed else "failed")
    expect(page.locator("#safety-missing li")).to_have_count(len(row.safety_missing))
    faithfulness = page.locator("#faithfulness")
    expect(faithfulness).to_be_visible()
    expect(faithfulness).to_have_attribute("data-state", "passed" if row.faithfulness_passed else "failed")
    expect(page.locator("#faithfulness-flags li")).to_have_count(len(row.faithfulness_flags))
    assert_accessible(page, "main page, translation done")

    # The patient handout: print view, copy, edit.
    page.get_by_role("link", name="Patient handout: print, copy or edit").click()
    expect(page).to_have_url(re.compile(rf"/translations/{row.request_id}/handout/$"))
    handout_text = page.locator("#handout-text")
    expect(handout_text).to_have_text(row.output_text)
    assert_accessible(page, "handout")
    page.get_by_role("button", name="Copy text").click()
    expect(page.locator("#handout-status")).to_have_text("Handout text copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == row.output_text

    page.emulate_media(media="print")
    expect(handout_text).to_be_visible()
    for hidden in (".bar", "#handout-form", "#copy-btn", "#print-btn"):
        expect(page.locator(hidden)).to_be_hidden()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.pdf(path=str(SCREENSHOTS / "handout.pdf"))
    page.emulate_media(media="screen")

    edited = "You have a heart problem.\nYour doctor will explain the next steps."
    page.get_by_role("textbox", name="Handout text").fill(edited)
    page.get_by_role("button", name="Save edit").click()
    expect(page.locator("#handout-status")).to_have_text(re.compile("Your edit was saved."))
    expect(handout_text).to_have_text(edited)
    expect(page.locator(".edits li")).to_have_count(1)
    edit = db(lambda: TranslationEdit.objects.select_related("editor").get())
    assert (edit.text, edit.editor.username) == (edited, clinician.username)
    assert edit.text_sha256 == hashlib.sha256(edited.encode()).hexdigest()
    event = db(lambda: AuditEvent.objects.get(event_type="handout_edit"))
    assert event.text_sha256 == edit.text_sha256 and event.request_id == row.request_id
    assert_accessible(page, "handout after an edit")
    page.screenshot(path=str(SCREENSHOTS / "handout.png"), full_page=True)

    # The detail page.
    page.get_by_role("link", name="Back to the translation").click()
    expect(page.get_by_role("heading", name=re.compile("^Translation of"))).to_be_visible()
    assert_accessible(page, "detail page")

    # The history: search finds it, not the other clinician's.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Your translations").click()
    word = max(re.findall(r"[A-Za-z]+", sentence), key=len)
    page.get_by_label("Search the diagnosis and explanation texts").fill(word.lower())
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#history-count")).to_have_text(re.compile(r"^1 translation matching"))
    expect(page.locator(f'a[href="/translations/{row.request_id}/"]')).to_be_visible()
    expect(page.locator(f'a[href="/translations/{theirs.request_id}/"]')).to_have_count(0)
    assert_accessible(page, "history")


def test_missing_facts_are_listed_next_to_the_text_and_spanish_gets_its_own_measure(
        daphne_server, clinician, ui_page):
    """An answer that drops the dose and the drug of the input: the safety
    panel lists both beside the text, the model's own check (answering 0.3,
    under the site's 0.6) says it doubts it, the glossary lists the drug
    under it, saying that no vetted vocabulary defines it in plain words, and
    names each entry's source; a Spanish explanation is measured with Szigriszt-Pazos, not FKGL."""
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_ANSWER="Your doctor will start a new medicine.",
                           FAKE_ENGINE_SELF_CHECK="0.3", SELF_CHECK_THRESHOLD="0.6")
    page = ui_page
    log_in(page, server, clinician.username)
    for panel in ("#safety", "#self-check", "#readability", "#glossary", "#verification", "#figures"):
        expect(page.locator(panel)).to_be_hidden()  # nothing to show before a translation
    page.get_by_label("Diagnosis text").fill(laymaker_sentences()[21])  # "... amitriptyline at a dose of 10 mg ..."
    page.get_by_role("button", name="Translate").click()
    expect(page.locator("#status")).to_have_text(re.compile(r"Safety check: 2 missing"))

    safety = page.locator("#safety")
    expect(safety).to_have_attribute("data-state", "failed")
    expect(page.locator("#safety-missing li")).to_have_text(["Dose: 10 mg", "Drug: amitriptyline"])
    text_box, safety_box = page.locator("#output").bounding_box(), safety.bounding_box()
    assert safety_box["x"] >= text_box["x"] + text_box["width"] and safety_box["y"] < text_box["y"] + 50
    expect(page.locator("#self-check")).to_have_attribute("data-state", "doubted")
    expect(page.locator("#self-check-summary")).to_have_text(re.compile(
        r"^Doubted by the model's own check: 30 % that it says the same as the diagnosis \(under 60 %\)\. "
        r"Read it against the diagnosis"))
    expect(page.locator("#status")).to_contain_text("Model's own check: doubted (30 %)")
    row = db(lambda: Translation.objects.get())
    assert row.glossary, "the glossary found no term"
    expect(page.locator("#glossary")).to_be_visible()
    expect(page.locator("#glossary-list dt")).to_have_text([entry["term"] for entry in row.glossary])
    shown = glossary_display(row.glossary)  # a drug without a vetted definition says so
    expect(page.locator("#glossary-list .glossary-definition")).to_have_text([e["definition"] for e in shown])
    expect(page.locator("#glossary-list .glossary-source")).to_have_text(
        ["Source: " + e["source_name"] for e in shown])
    assert "A medicine (no vetted plain definition)." in [e["definition"] for e in shown]  # amitriptyline
    glossary_box = page.locator("#glossary").bounding_box()
    assert glossary_box["y"] > text_box["y"] + text_box["height"]  # under the translation
    assert_accessible(page, "main page, safety check failed")

    expect(page.locator("#language-note")).to_be_hidden()
    page.get_by_label("Patient's language").select_option("es")
    expect(page.locator("#language-note")).to_contain_text("Have a colleague who reads Spanish check it")
    page.get_by_role("button", name="Translate").click()
    expect(page.locator("#q-output")).to_have_text(re.compile(r"of 100 \(Szigriszt-Pazos; higher is easier\)$"),
                                                   timeout=30_000)
    expect(page.locator("#output")).to_have_attribute("lang", "es")
    expect(page.locator("#q-note")).to_contain_text("INFLESZ")


def test_keyboard_only_translate_and_cancel(daphne_server, clinician, ui_page):
    """Skip link, visible focus, no trap in the text box, Enter to translate,
    focus moves to Cancel while streaming and back after cancelling."""
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.1")
    page = ui_page
    log_in(page, server, clinician.username)
    focused_id = "document.activeElement.id"

    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to main content")
    expect(skip).to_be_focused()
    assert skip.bounding_box()["y"] >= 0  # shown when focused
    page.keyboard.press("Enter")
    assert page.evaluate(focused_id) == "main"
    page.keyboard.press("Tab")
    assert page.evaluate(focused_id) == "diagnosis"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid", "focus is not visible"
    page.keyboard.type(" ".join(["word"] * 200))
    page.keyboard.press("Tab")  # no trap: Tab leaves the text box
    assert page.evaluate(focused_id) == "reading-level"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate(focused_id) == "translate-btn"
    page.keyboard.press("Enter")
    expect(page.locator("#output")).not_to_be_empty()
    expect(page.locator("#output")).to_have_attribute("aria-busy", "true")
    assert page.evaluate(focused_id) == "cancel-btn"
    page.keyboard.press("Enter")

    expect(page.locator("#status")).to_have_text(re.compile(r"^Cancelled\."))
    expect(page.locator("#output")).to_have_attribute("aria-busy", "false")
    assert page.evaluate(focused_id) == "translate-btn"
    assert db(lambda: Translation.objects.get()).status == Translation.Status.CANCELLED


@pytest.mark.parametrize("width", [1280, 390])
def test_controls_are_at_least_24_px_and_the_page_reflows(shared_fake_server, clinician, ui_page, width):
    """WCAG 2.2 target size (2.5.8) for buttons, fields and menus, and no
    horizontal scrolling at a phone's width (1.4.10)."""
    server = shared_fake_server
    page = ui_page
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, server, clinician.username)
    sizes = page.evaluate("""() => [...document.querySelectorAll(
            'button, select, textarea, input:not([type=hidden]), nav a, .skip-link')]
        .filter((el) => el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden')
        .map((el) => { const r = el.getBoundingClientRect();
                       return [el.id || el.textContent.trim(), r.width, r.height]; })""")
    assert sizes and not [s for s in sizes if s[1] < 24 or s[2] < 24], sizes
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert_accessible(page, f"main page at {width} px")
