"""An IT account in a real browser (Debian's chromium, Playwright) signs in
to the clinicians' page: before roles were enforced it could translate;
now it is told why it may not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import PASSWORD, in_worker_thread
from tests.live.test_browser import CHROMIUM, browser_page  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is installed by scripts/setup.sh")]


def it_user_create():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user("it-admin", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="IT")[0])
    return user


def test_an_it_user_in_the_browser_is_told_it_may_not_translate(shared_fake_server, browser_page):  # noqa: F811
    server = shared_fake_server
    in_worker_thread(it_user_create)
    page = browser_page
    page.goto(server.base_url + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill("it-admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("Clinician group")
    expect(page.get_by_role("link", name="Go to the administration")).to_be_visible()
    expect(page.locator("#translate-form")).to_have_count(0)
