"""The nginx configuration renderer (deploy/render_nginx.py), checked by
Debian's nginx itself (``nginx -t``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
import render_nginx  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


@pytest.mark.skipif(not os.path.exists(NGINX), reason="Debian's nginx is not installed")
@pytest.mark.parametrize("count", [1, 3])
def test_the_rendered_config_passes_nginx_t_with_every_replica_as_an_upstream(tmp_path, count):
    replicas = [f"10.0.0.{i + 11}:8001" for i in range(count)]
    conf = render_nginx.write(tmp_path / "nginx.conf", replicas=replicas, listen="127.0.0.1:18080",
                              runtime_dir=tmp_path)
    checked = subprocess.run([NGINX, "-t", "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "e.log")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    text = conf.read_text()
    assert [line.split()[1] for line in text.splitlines() if line.strip().startswith("server 10.")] == replicas
    assert f"proxy_next_upstream_tries {count};" in text


def test_websockets_are_upgraded_streams_unbuffered_and_routing_is_not_sticky(tmp_path):
    text = render_nginx.render(replicas=["a:1", "b:2"], listen="80", ws_timeout_s=1800, read_timeout_s=300)
    assert "proxy_set_header Upgrade $http_upgrade;" in text
    assert "proxy_set_header Connection $connection_upgrade;" in text
    assert "proxy_read_timeout 1800s;" in text and "proxy_read_timeout 300s;" in text
    assert "proxy_buffering off;" in text
    directives = [line.split()[0] for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert not {"ip_hash", "hash", "sticky", "least_conn"} & set(directives)  # plain round robin
    assert not re.search(r"@[A-Z_]+@", text)  # every placeholder was filled in


@pytest.mark.parametrize("bad", ["", "nohost", "a:0", "a:70000", "a b:1"])
def test_a_bad_replica_address_is_refused(bad):
    with pytest.raises(ValueError):
        render_nginx.render(replicas=[bad] if bad else [], listen="80")
