"""Screenshot the clinician's page after a translation finished, and its
handout page, at a desktop width (1280 px) and a phone width (390 px), for
docs/.

    .venv/bin/python scripts/main_screenshot.py            # default model
    .venv/bin/python scripts/main_screenshot.py --model PATH.gguf --sentence 47
    .venv/bin/python scripts/main_screenshot.py --text "Acute inferior STEMI with complete heart block." \
        --desktop docs/marks-desktop.png --phone docs/marks-phone.png --handout docs/marks-handout.png

Migrates a fresh SQLite database in a temporary folder, creates a
clinician there, starts Daphne with the real engine (llama.cpp, the
default model unless --model), logs in through the login form in Debian's
chromium, translates one laymaker-dev sentence and saves full-page PNGs.
No Celery worker runs, so a low-confidence output stays "queued for
verification". Needs Redis at REDIS_URL (default redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.processes import READY_TIMEOUT_S, readyz_wait  # noqa: E402
from tests.data import laymaker_sentences  # noqa: E402

USER, PASSWORD = "dr-screenshot", "dr-screenshot-password-1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="GGUF file (default: the app's default model)")
    parser.add_argument("--sentence", type=int, default=47, help="row of laymaker-dev.csv (0-based)")
    parser.add_argument("--desktop", default="docs/main-desktop.png")
    parser.add_argument("--phone", default="docs/main-phone.png")
    parser.add_argument("--text", default="", help="a diagnosis to translate instead of --sentence")
    parser.add_argument("--handout", default="", help="also screenshot the handout page (desktop width) here")
    parser.add_argument("--port", type=int, default=8767)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = uuid.uuid4().hex[:8]
        env = dict(os.environ, DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3", INFERENCE_ENGINE="llamacpp",
                   INFERENCE_MODEL=args.model, REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
                   CHANNEL_PREFIX=f"shot-{run}", CELERY_KEY_PREFIX=f"shot-{run}:", CACHE_PREFIX=f"shot-{run}")
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
        subprocess.run([*manage, "shell", "-c",
                        "from django.contrib.auth.models import User, Group\n"
                        f"u = User.objects.create_user('{USER}', password='{PASSWORD}')\n"
                        "u.groups.add(Group.objects.get(name='Clinician'))"], cwd=ROOT, env=env, check=True)
        server = subprocess.Popen([*manage[:1], "-m", "daphne", "-b", "127.0.0.1", "-p", str(args.port),
                                   "clinical.asgi:application"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{args.port}"
        try:
            readyz_wait(base, 200, READY_TIMEOUT_S)  # loads the engine and reads its prefixes
            shoot(base, args.text or laymaker_sentences()[args.sentence], args.desktop, args.phone, args.handout)
        finally:
            server.terminate()
            server.wait(timeout=20)
    print(f"wrote {args.desktop} and {args.phone}" + (f" and {args.handout}" if args.handout else ""))
    return 0


def shoot(base: str, sentence: str, desktop: str, phone: str, handout: str = "") -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + "/accounts/login/")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.get_by_label("Diagnosis text").fill(sentence)
        page.get_by_role("button", name="Translate").click()
        expect(page.locator("#status")).to_have_text(re.compile(r"^Done"), timeout=300_000)
        expect(page.locator("#sentences-slot")).to_be_visible()  # the marks and the sentence table
        page.locator("#diagnosis").blur()
        page.screenshot(path=desktop, full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=phone, full_page=True)
        if handout:
            page.set_viewport_size({"width": 1280, "height": 900})
            page.get_by_role("link", name=re.compile("Patient handout")).click()
            expect(page.get_by_role("heading", name="Patient handout")).to_be_visible()
            page.screenshot(path=handout, full_page=True)
        browser.close()


if __name__ == "__main__":
    raise SystemExit(main())
