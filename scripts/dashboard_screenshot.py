"""Screenshot the IT dashboard in headless Chromium (for docs/).

    .venv/bin/python scripts/dashboard_screenshot.py --db /tmp/sample.sqlite3 --out docs/dashboard.png

Starts Daphne on the given SQLite database (one with translations in it),
creates an IT user there,
logs in through the admin login form and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
USER, PASSWORD = "it-screenshot", "it-screenshot-password-1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", default="docs/dashboard.png")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{Path(args.db).resolve()}", INFERENCE_ENGINE="fake")
    subprocess.run([sys.executable, "manage.py", "shell", "-c",
                    "from django.contrib.auth.models import User, Group\n"
                    f"u, _ = User.objects.get_or_create(username='{USER}', defaults={{'is_staff': True}})\n"
                    f"u.set_password('{PASSWORD}'); u.is_staff = True; u.save()\n"
                    "u.groups.add(Group.objects.get(name='IT'))"], cwd=ROOT, env=env, check=True)
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(args.port),
                               "clinical.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(100):
            try:
                httpx.get(base + "/admin/login/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "/admin/login/?next=/admin/dashboard/")
            page.fill("#id_username", USER)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("img[alt^='TTFT']")
            page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
