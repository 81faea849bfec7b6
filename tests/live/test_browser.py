"""A clinician in a real browser (Debian's chromium driven by Playwright)
against a real Daphne: log in, translate, watch tokens stream, cancel."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from clinical.models import Translation
from inference.weights import smollm2_gguf_path, smollm2_hf_path
from tests.conftest import PASSWORD, ROOT, browser_messages, in_worker_thread, print_page_if_failed
from tests.data import laymaker_sentences

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "var" / "screenshots"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by scripts/setup.sh")


@pytest.fixture
def browser_page(request):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        messages = browser_messages(page)
        yield page
        print_page_if_failed(request, page, messages)
        browser.close()
    # The page must work under the Content-Security-Policy without violations.
    assert not [m for m in messages if "Content Security Policy" in m], messages


def only_translation() -> Translation:
    """The one Translation row, read in a worker thread: Playwright's sync
    API keeps an event loop running in the test's thread, where Django
    refuses ORM calls."""
    return in_worker_thread(lambda: Translation.objects.select_related("user")
                            .prefetch_related("reruns").get())


def log_in(page, server, username: str) -> None:
    # Load the engine and the quality word lists first (GET /readyz), so the
    # first translation's timeouts do not include them.
    assert httpx.get(server.base_url + "/readyz", timeout=180).status_code == 200
    page.goto(server.base_url + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Explain a diagnosis to a patient")).to_be_visible()


def translate(page, text: str) -> None:
    page.get_by_label("Diagnosis text").fill(text)
    page.get_by_role("button", name="Translate").click()


def count_output_updates(page) -> None:
    page.evaluate("""() => {
        window.__outputUpdates = 0;
        new MutationObserver(() => { window.__outputUpdates += 1; })
            .observe(document.getElementById('output'), {childList: true, characterData: true, subtree: true});
    }""")


def test_clinician_watches_a_translation_stream_in(daphne_server, clinician, browser_page):
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()))
    page = browser_page
    log_in(page, server, clinician.username)
    sentence = laymaker_sentences()[17]
    page.get_by_label("Diagnosis text").fill(sentence)
    page.get_by_label("Reading level").select_option("8")
    count_output_updates(page)
    page.get_by_role("button", name="Translate").click()

    expect(page.locator("#status")).to_have_text(re.compile(r"^Done"), timeout=60_000)
    assert page.evaluate("window.__outputUpdates") >= 3, "the text did not stream in pieces"
    expect(page.locator("#fig-ttft")).to_have_text(re.compile(r"^[\d,]+ ms$"))
    expect(page.locator("#fig-total")).to_have_text(re.compile(r"^[\d,]+ ms$"))
    confidence = float(page.locator("#fig-confidence").inner_text())
    assert 0 < confidence <= 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "translate-done.png"), full_page=True)

    row = only_translation()
    assert row.status == Translation.Status.COMPLETED and row.user == clinician
    assert (row.reading_level, row.language) == (8, "en")
    assert page.locator("#output").inner_text().strip() == row.output_text
    assert f"{row.confidence:.2f}" == page.locator("#fig-confidence").inner_text()


@pytest.mark.slow
def test_verified_text_replaces_the_fast_one_and_is_there_on_return(
        daphne_server, celery_worker_process, clinician, browser_page):
    """Below the threshold the page shows verification progress, then swaps
    in the FP32 text (fast draft kept for comparison); the detail page shows
    the verified text after the clinician comes back."""
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01")
    celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                          # the replicas' model: the worker refuses another (clinical.rerun.worker_engine)
                          INFERENCE_MODEL=str(smollm2_gguf_path()))
    page = browser_page
    log_in(page, server, clinician.username)
    sentence = laymaker_sentences()[8]
    translate(page, sentence)

    verification = page.locator("#verification")
    expect(verification).to_be_visible(timeout=30_000)
    expect(page.locator("#verification-progress")).to_be_visible()
    expect(verification).to_have_attribute("data-state", "verified", timeout=240_000)
    expect(page.locator("#verification-progress")).to_be_hidden()
    expect(verification).to_contain_text("Verified in full precision (fp32)")
    fast = "Plain words: " + sentence
    page.get_by_text("Compare with the fast draft").click()
    expect(page.locator("#fast-text")).to_have_text(fast)
    verified_text = only_translation().verified_rerun.output_text
    expect(page.locator("#output")).to_have_text(verified_text)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "translate-verified.png"), full_page=True)

    page.goto(server.base_url + "/")
    page.locator("table.recent a").first.click()
    expect(page.locator("#output")).to_have_text(verified_text)
    expect(page.locator("#verification")).to_contain_text("Verified in full precision")
    expect(page.locator("#fast-text")).to_have_text(fast)


def test_where_the_model_doubts_every_text_the_page_gives_the_diagnosis_as_written_and_keeps_the_draft(
        daphne_server, celery_worker_process, clinician, browser_page):
    """The model's own check doubts the fast text and every text the re-run
    writes (P(yes) 0.3 under the site's 0.6): the page swaps in the
    diagnosis as written with the reason, the doubted text stays readable
    as the fast draft, and the handout has only the diagnosis."""
    doubting = {"FAKE_ENGINE_SELF_CHECK": "0.3", "SELF_CHECK_THRESHOLD": "0.6"}
    server = daphne_server(INFERENCE_ENGINE="fake", **doubting)
    celery_worker_process(RERUN_ENGINE="fake", RERUN_CANDIDATES="full_precision,sampled", **doubting)
    page = browser_page
    log_in(page, server, clinician.username)
    sentence = laymaker_sentences()[8]
    translate(page, sentence)

    verification = page.locator("#verification")
    expect(verification).to_have_attribute("data-state", "verified", timeout=120_000)
    expect(page.locator("#output")).to_have_text(sentence)
    expect(verification).to_contain_text("The diagnosis text as written: the model's own check doubted the "
                                          "plain-words version; explain it to the patient yourself")
    expect(verification).not_to_contain_text("still doubts")
    expect(page.locator("#status")).to_have_text(re.compile(r"^The diagnosis as written is shown: the model's own "
                                                            r"check doubted the plain-words version"))
    page.get_by_text("Compare with the fast draft").click()
    expect(page.locator("#fast-text")).to_have_text("Plain words: " + sentence)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "translate-as-written.png"), full_page=True)

    row = only_translation()
    rerun = row.verified_rerun
    assert (rerun.candidate, rerun.output_text) == ("as_written", sentence)
    assert [r["name"] for r in rerun.candidates if "skipped" not in r] == ["full_precision", "sampled", "as_written"]
    page.goto(f"{server.base_url}/translations/{row.request_id}/handout/")
    expect(page.locator("#handout-text")).to_have_text(sentence)
    expect(page.locator("#handout")).not_to_contain_text("Plain words: ")  # what is printed
    page.get_by_text("The plain-words draft the model doubted").click()  # for the clinician to judge
    expect(page.locator("#doubted-draft-text")).to_have_text("Plain words: " + sentence)


def test_the_live_page_names_the_doubted_sentences_of_a_note_as_the_detail_page_does(
        daphne_server, clinician, browser_page):
    """A note of two sentences, each checked on its own (P(yes) 0.3 under
    the site's 0.6): the live page's panel (quality.js) names both, in the
    words the server-rendered detail page uses (clinical.quality.display).
    While the sentences are checked, the status says so (the ``checking``
    frame), not "Translating…"."""
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_SELF_CHECK="0.3", SELF_CHECK_THRESHOLD="0.6")
    page = browser_page
    log_in(page, server, clinician.username)
    page.evaluate("""() => {
        window.statusSeen = [];
        new MutationObserver(() => window.statusSeen.push(document.getElementById("status").textContent))
            .observe(document.getElementById("status"), {childList: true, characterData: true, subtree: true});
    }""")
    translate(page, "Mild left knee effusion. No fracture is seen.")
    summary = page.locator("#self-check-summary")
    expect(summary).to_contain_text("Checked sentence by sentence, the lowest shown: sentences 1 and 2 of 2 are "
                                    "doubted.", timeout=60_000)
    live = summary.text_content()
    expect(page.locator("#status")).to_contain_text("Model's own check: doubted (30 %, sentences 1 and 2)")
    seen = page.evaluate("window.statusSeen")
    checking = "Written. The model is checking each of its 2 sentences against the diagnosis…"
    assert checking in seen and seen.index(checking) > seen.index("Translating…"), seen
    row = only_translation()
    assert [c["p_yes"] for c in row.sentence_checks] == pytest.approx([0.3, 0.3])
    page.goto(f"{server.base_url}/translations/{row.request_id}/")
    expect(page.locator("#self-check-summary")).to_have_text(live)


def test_cancel_button_stops_the_stream(daphne_server, clinician, browser_page):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.1")
    page = browser_page
    log_in(page, server, clinician.username)
    page.get_by_label("Diagnosis text").fill(" ".join(["word"] * 200))
    page.get_by_role("button", name="Translate").click()
    expect(page.locator("#output")).not_to_be_empty(timeout=60_000)  # the first request loads the word lists
    page.get_by_role("button", name="Cancel").click()

    expect(page.locator("#status")).to_have_text(re.compile(r"^Cancelled\."))
    expect(page.get_by_role("button", name="Translate")).to_be_enabled()
    row = only_translation()
    assert row.status == Translation.Status.CANCELLED
    assert row.tokens_out < 150


#: Replaces the page's first WebSocket by one that stays CONNECTING until
#: the test calls ``window.dropFirstSocket()``, which closes it unopened, as
#: a busy server that drops the handshake does (close code 1006).
FIRST_SOCKET_NEVER_OPENS = """(() => {
  const Real = window.WebSocket;
  let first = true;
  class NeverOpens extends EventTarget {
    constructor(url) {
      super();
      this.url = url;
      this.readyState = Real.CONNECTING;
      window.dropFirstSocket = () => {
        this.readyState = Real.CLOSED;
        this.dispatchEvent(new CloseEvent("close", { code: 1006 }));
      };
    }
    send() { throw new DOMException("still connecting", "InvalidStateError"); }
    close() {}
  }
  function Patched(url, protocols) {
    if (first) { first = false; return new NeverOpens(url); }
    return new Real(url, protocols);
  }
  Object.assign(Patched, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
  window.WebSocket = Patched;
})();"""


def test_a_translation_asked_for_while_the_socket_opens_survives_a_dropped_handshake(
        daphne_server, clinician, browser_page):
    server = daphne_server(INFERENCE_ENGINE="fake")
    page = browser_page
    page.add_init_script(FIRST_SOCKET_NEVER_OPENS)
    log_in(page, server, clinician.username)
    translate(page, "Mild left knee effusion.")
    expect(page.locator("#status")).to_have_text("Connecting…")
    page.evaluate("window.dropFirstSocket()")

    expect(page.locator("#status")).to_have_text(re.compile(r"^Done"), timeout=60_000)
    expect(page.locator("#output")).to_have_text("Plain words: Mild left knee effusion.")
    assert only_translation().status == Translation.Status.COMPLETED  # sent once, on the new socket


def test_the_idle_warning_offers_one_click_to_stay_signed_in(daphne_server, clinician, browser_page):
    server = daphne_server(INFERENCE_ENGINE="fake", SESSION_IDLE_TIMEOUT_S="124")
    page = browser_page
    log_in(page, server, clinician.username)
    warning = page.get_by_role("alertdialog")
    expect(warning).to_be_visible(timeout=15_000)  # 2 minutes before the end
    expect(warning).to_contain_text("signed out in 2 minutes")
    page.get_by_role("button", name="Stay signed in").click()
    expect(warning).to_be_hidden()
    expect(warning).to_be_visible(timeout=15_000)  # the timer restarted, so it warns again
