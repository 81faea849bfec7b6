"""The login lockout holds behind the real nginx whatever X-Forwarded-For a
client sends: nginx writes the client address itself and the replica
(``python -m clinical.serve --proxy-headers``) trusts exactly that one hop."""

from __future__ import annotations

import httpx
from axes.models import AccessAttempt
from django.conf import settings

from tests.conftest import PASSWORD
from tests.live.test_replicas import Nginx, Replica, needs_nginx


def _login(client: httpx.Client, username: str, password: str, forged: str) -> httpx.Response:
    client.get("/accounts/login/")
    return client.post("/accounts/login/", headers={"X-Forwarded-For": forged}, data={
        "username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]})


@needs_nginx
def test_a_forged_address_per_guess_does_not_escape_the_lockout(stack_env, tmp_path, clinician):
    """The attack: each wrong guess sends a new ``X-Forwarded-For``; with
    ``$proxy_add_x_forwarded_for`` and Daphne's leftmost address each was a
    new client to django-axes and the right password was then accepted."""
    replica = Replica("web-probe", stack_env | {"INFERENCE_ENGINE": "fake"}, tmp_path / "web.log")
    proxy = None
    try:
        replica.wait_ready()
        proxy = Nginx([replica], tmp_path / "nginx")
        with httpx.Client(base_url=proxy.base_url, timeout=30) as client:
            for guess in range(settings.AXES_FAILURE_LIMIT):
                response = _login(client, clinician.username, f"wrong-{guess}", f"203.0.113.{guess + 1}")
                assert response.status_code in (200, 429), response.text[:300]
            locked = _login(client, clinician.username, PASSWORD, "198.51.100.77")
        assert locked.status_code == 429, replica.logs()[-2000:]
        (attempt,) = AccessAttempt.objects.filter(username=clinician.username)
        assert attempt.ip_address == "127.0.0.1" and attempt.failures_since_start >= settings.AXES_FAILURE_LIMIT
    finally:
        if proxy is not None:
            proxy.stop()
        replica.stop()
