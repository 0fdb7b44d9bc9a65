"""Shared fixtures for the browser tests (runner, envs): local static sites on 127.0.0.1 and one shared browser session per module."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HTML_DIR = Path(__file__).resolve().parent / "fixtures" / "html"


class StaticSite:
    """A quiet static file server that remembers every path it was asked for (to prove blocked requests never
    arrive)."""

    def __init__(self, directory: Path) -> None:
        self.requests: list[str] = []
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                site.requests.append(self.path)
                super().do_GET()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def site() -> Iterator[StaticSite]:
    s = StaticSite(HTML_DIR)
    yield s
    s.close()


@pytest.fixture(scope="module")
def foreign_site() -> Iterator[StaticSite]:
    """A second local server on another port: the 'outside world' the page must never reach."""
    s = StaticSite(HTML_DIR)
    yield s
    s.close()


@pytest.fixture(scope="module")
def session(site: StaticSite):
    from runner.browser import BrowserSession

    with BrowserSession([site.url]) as s:
        yield s
