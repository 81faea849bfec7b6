"""A clinician in a real browser (Debian's chromium driven by Playwright)
against a real Daphne: log in, translate, watch tokens stream, cancel."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from clinical.models import Translation
from inference.models import smollm2_gguf_path
from tests.conftest import PASSWORD
from tests.data import laymaker_sentences

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by scripts/setup.sh")


@pytest.fixture
def browser_page():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        yield page
        browser.close()


def only_translation() -> Translation:
    """The one Translation row, read in a worker thread: Playwright's sync
    API keeps an event loop running in the test's thread, where Django
    refuses ORM calls."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: Translation.objects.select_related("user").get()).result()


def log_in(page, server, username: str) -> None:
    page.goto(server.base_url + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Explain a diagnosis to a patient")).to_be_visible()


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
    count_output_updates(page)
    page.get_by_role("button", name="Translate").click()

    expect(page.locator("#status")).to_have_text("Done.", timeout=60_000)
    assert page.evaluate("window.__outputUpdates") >= 3, "the text did not stream in pieces"
    expect(page.locator("#fig-ttft")).to_have_text(re.compile(r"^[\d,]+ ms$"))
    expect(page.locator("#fig-total")).to_have_text(re.compile(r"^[\d,]+ ms$"))
    confidence = float(page.locator("#fig-confidence").inner_text())
    assert 0 < confidence <= 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "translate-done.png"), full_page=True)

    row = only_translation()
    assert row.status == Translation.Status.COMPLETED and row.user == clinician
    assert page.locator("#output").inner_text().strip() == row.output_text
    assert f"{row.confidence:.2f}" == page.locator("#fig-confidence").inner_text()


def test_cancel_button_stops_the_stream(daphne_server, clinician, browser_page):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.1")
    page = browser_page
    log_in(page, server, clinician.username)
    page.get_by_label("Diagnosis text").fill(" ".join(["word"] * 200))
    page.get_by_role("button", name="Translate").click()
    expect(page.locator("#output")).not_to_be_empty()
    page.get_by_role("button", name="Cancel").click()

    expect(page.locator("#status")).to_have_text("Cancelled.")
    expect(page.get_by_role("button", name="Translate")).to_be_enabled()
    row = only_translation()
    assert row.status == Translation.Status.CANCELLED
    assert row.tokens_out < 150
