"""envs.server: sites start on 127.0.0.1, reset restores the seeded state, stop closes the port."""

from __future__ import annotations

import http.cookiejar
import socket
import sqlite3
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from envs.server import Sites, expand_url, template_db
from envs.sites import SiteUnavailableError, get_site


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sites")


def _port(url: str) -> int:
    return int(urllib.parse.urlsplit(url).port)


def _signed_in_opener(base: str) -> urllib.request.OpenerDirector:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    data = urllib.parse.urlencode({"username": "alex", "password": "confkv"}).encode()
    opener.open(f"{base}/login", data=data, timeout=10)
    return opener


def test_start_serve_stop_closes_port(workdir: Path) -> None:
    sites = Sites(["shopping"], workdir=workdir)
    try:
        base = sites.url("shopping")
        assert sites.urls == {"__SHOPPING__": base}
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}/", timeout=10) as response:
            assert response.status == 200 and b"OneStopShop" in response.read()
    finally:
        sites.stop()
    sites.stop()  # idempotent
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", _port(base)), timeout=2).close()


def test_binds_only_loopback(workdir: Path) -> None:
    with Sites(["shopping"], workdir=workdir) as sites:
        port = _port(sites.url("shopping"))
        bound = {sock.getsockname()[0] for sock in [sites._running["shopping"].server.socket]}
        assert bound == {"127.0.0.1"}
        # Another local address (not loopback 127.0.0.1) must not reach the server.
        outward = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            outward.connect(("10.255.255.255", 1))
            own_ip = outward.getsockname()[0]
        except OSError:
            own_ip = None
        finally:
            outward.close()
        if own_ip and not own_ip.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((own_ip, port), timeout=2).close()


def test_reset_restores_seeded_state_after_post(workdir: Path) -> None:
    with Sites(["shopping"], workdir=workdir) as sites:
        base = sites.url("shopping")
        live = sites.db_path("shopping")
        count = lambda: sqlite3.connect(live).execute("SELECT COUNT(*) FROM reviews").fetchone()[0]  # noqa: E731
        before = count()
        opener = _signed_in_opener(base)
        form = urllib.parse.urlencode({"rating": "5", "title": "Reset me", "body": "Should vanish."}).encode()
        opener.open(f"{base}/product/3/reviews", data=form, timeout=10)
        assert count() == before + 1
        with opener.open(f"{base}/product/3", timeout=10) as page:
            assert b"Should vanish." in page.read()
        sites.reset()
        assert count() == before
        with opener.open(f"{base}/product/3", timeout=10) as page:  # the running server sees the reset at once
            assert b"Should vanish." not in page.read()


def test_site_clock_gives_every_replay_the_same_times(workdir: Path) -> None:
    """A post's time is on the page, so the site clock stamps it, not the wall clock: one minute per reading from a
    fixed start, again from the start after a reset, so replaying the same steps shows the same text in every
    process (forced rows pair by the tokens fed) and new posts still sort after the seeded ones and each other."""
    from datetime import timedelta

    from envs.forum.seed import SITE_NOW, TIME_FORMAT
    from envs.webapp import SITE_CLOCK_START

    with Sites(["forum"], workdir=workdir) as sites:
        base, live = sites.url("forum"), sites.db_path("forum")

        def post(title: str) -> str:
            form = urllib.parse.urlencode({"forum": "diy", "title": title, "body": "Tick."}).encode()
            _signed_in_opener(base).open(f"{base}/submit", data=form, timeout=10)
            row = sqlite3.connect(live).execute("SELECT created_at FROM threads WHERE title = ?", (title,)).fetchone()
            return row[0]

        first, second = post("Clock one"), post("Clock two")
        assert first == SITE_CLOCK_START.strftime(TIME_FORMAT) and SITE_CLOCK_START > SITE_NOW
        assert second == (SITE_CLOCK_START + timedelta(minutes=1)).strftime(TIME_FORMAT)
        sites.reset()
        assert post("Clock one") == first


def test_template_is_cached_and_rebuilt_per_seed(workdir: Path) -> None:
    spec = get_site("shopping")
    first = template_db(spec, 0, workdir)
    mtime = first.stat().st_mtime_ns
    assert template_db(spec, 0, workdir) == first and first.stat().st_mtime_ns == mtime
    other = template_db(spec, 3, workdir)
    assert other != first and other.is_file()


def test_expand_url_and_errors() -> None:
    urls = {"__SHOPPING__": "http://127.0.0.1:5000/", "__FORUM__": "http://127.0.0.1:5001"}
    assert expand_url("__SHOPPING__/orders |AND| __FORUM__/f/1", urls) == (
        "http://127.0.0.1:5000/orders |AND| http://127.0.0.1:5001/f/1")
    with pytest.raises(ValueError, match="__CLASSIFIEDS__"):
        expand_url("__CLASSIFIEDS__/", urls)
    with pytest.raises(SiteUnavailableError, match="known sites"):
        Sites(["nosuchsite"])
