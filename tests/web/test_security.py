"""Production settings, security headers and the Content-Security-Policy."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def test_production_settings_pass_the_deploy_checks_with_zero_warnings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING",
                        DJANGO_ENV="production", DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
                        DJANGO_ALLOWED_HOSTS="clinic.example.org")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECRET_KEY"}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True,
                            text=True, env={**env, "DJANGO_ENV": "production"}, timeout=120)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_pages_carry_a_strict_csp_and_security_headers(client, url):
    response = client.get(url)
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["script-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
