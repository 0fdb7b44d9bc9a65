"""Confinement by construction: a listener on a non-site loopback port (TCP and UDP) must see nothing, whatever a
page tries (WebRTC STUN/TURN, fetch, WebSocket, beacons, prefetch/preconnect, iframes, server redirects,
navigations), including from a `data:` top-level page; and every refusal is recorded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runner.browser import BrowserSession
from runner.netguard import GuardProxy

pytestmark = pytest.mark.browser


class Listener:
    """TCP and UDP sockets on one free loopback port; `hits` records every connection or datagram."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.hits: list[str] = []
        self._stop = False
        for target in (self._accept, self._recv):
            threading.Thread(target=target, daemon=True).start()

    def _accept(self) -> None:
        self.tcp.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                continue
            conn.settimeout(0.5)
            try:
                data = conn.recv(200)
            except OSError:
                data = b""
            self.hits.append(f"tcp {data[:60]!r}")
            conn.close()

    def _recv(self) -> None:
        self.udp.settimeout(0.2)
        while not self._stop:
            try:
                data, _ = self.udp.recvfrom(2048)
            except OSError:
                continue
            self.hits.append(f"udp {data[:20]!r}")

    def close(self) -> None:
        self._stop = True
        time.sleep(0.3)
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


def _hostile_page(foreign: str, foreign_port: int) -> str:
    return f"""<!doctype html><html><head><title>hostile</title>
<link rel="preconnect" href="{foreign}"><link rel="dns-prefetch" href="{foreign}">
<link rel="prefetch" href="{foreign}/prefetch"><link rel="preload" as="image" href="{foreign}/preload.png">
</head><body><a id="out" href="{foreign}/link">out</a>
<iframe src="{foreign}/iframe"></iframe><img src="{foreign}/img.png">
<script>
  try {{ fetch("{foreign}/fetch", {{mode: "no-cors"}}).catch(() => 0); }} catch (e) {{}}
  try {{ navigator.sendBeacon("{foreign}/beacon", "x"); }} catch (e) {{}}
  try {{ new WebSocket("ws://127.0.0.1:{foreign_port}/ws"); }} catch (e) {{}}
  try {{ new EventSource("{foreign}/sse"); }} catch (e) {{}}
  for (const Ctor of [window.RTCPeerConnection, window.webkitRTCPeerConnection]) {{
    if (!Ctor) continue;
    try {{
      const pc = new Ctor({{iceServers: [{{urls: "stun:127.0.0.1:{foreign_port}"}},
        {{urls: "turn:127.0.0.1:{foreign_port}?transport=tcp", username: "u", credential: "p"}},
        {{urls: "turn:127.0.0.1:{foreign_port}?transport=udp", username: "u", credential: "p"}}]}});
      pc.createDataChannel("x");
      pc.createOffer().then(o => pc.setLocalDescription(o)).catch(() => 0);
    }} catch (e) {{}}
  }}
</script></body></html>"""


class Site:
    """The task's one allowed site: serves the hostile page and a redirect to the foreign port."""

    def __init__(self, foreign: str, foreign_port: int) -> None:
        page = _hostile_page(foreign, foreign_port).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if self.path.startswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", f"{foreign}/redirected")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = page if self.path.startswith("/hostile") else b"<title>ok</title>ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_nothing_reaches_a_foreign_port(listener: Listener) -> None:
    foreign = f"http://127.0.0.1:{listener.port}"
    site = Site(foreign, listener.port)
    try:
        with BrowserSession([site.url], timeout_ms=5000) as s:
            page = s.active_page
            page.goto(f"{site.url}/hostile", wait_until="load")
            page.hover("#out")
            page.click("#out", no_wait_after=True)
            page.wait_for_timeout(500)
            for url in (f"{site.url}/redirect", f"{foreign}/direct", f"https://127.0.0.1:{listener.port}/tls"):
                try:
                    s.active_page.goto(url)
                except Exception:  # noqa: BLE001 - the refusal surfaces as an aborted navigation
                    pass
            # a data: top-level page is no hole: it gets the same treatment as any other
            data_page = s.new_tab()
            data_page.goto("data:text/html;base64," + _b64(_hostile_page(foreign, listener.port)), wait_until="commit")
            data_page.wait_for_timeout(2500)  # ICE gathering, retries
            assert data_page.url.startswith("data:text/html")
            blocked = list(s.blocked)
        print(f"\nblocked: {blocked}\nlistener saw: {listener.hits}")
        assert listener.hits == []
        assert any(f"{foreign}/fetch" in b for b in blocked)
        assert any(f"{foreign}/redirected" in b for b in blocked)
        assert any(f"{foreign}/direct" in b for b in blocked)
    finally:
        site.close()


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def test_guard_proxy_refuses_without_connecting_upstream(listener: Listener) -> None:
    """The proxy alone (no browser): a CONNECT or absolute-URL request to a non-allowed port is answered 403 and
    the target port sees no connection; an allowed one is relayed."""
    blocks: list[str] = []
    site = Site("http://127.0.0.1:9", 9)
    proxy = GuardProxy([("127.0.0.1", site.server.server_port)], blocks.append)
    try:
        for request in (f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\nHost: x\r\n\r\n",
                        f"GET http://127.0.0.1:{listener.port}/x HTTP/1.1\r\nHost: x\r\n\r\n",
                        "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n"):  # fmt: skip
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
                c.sendall(request.encode())
                assert c.recv(100).startswith(b"HTTP/1.1 403")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            c.sendall(f"GET {site.url}/ok HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n".encode())
            reply = b""
            while chunk := c.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(b"ok")
        time.sleep(0.3)
        assert listener.hits == []
        assert len(blocks) == 3 and blocks[0] == f"CONNECT 127.0.0.1:{listener.port}"
    finally:
        proxy.close()
        site.close()


def test_an_episodes_blocks_land_in_the_trace_db(listener: Listener, tmp_path) -> None:
    from pathlib import Path

    from agent.model_policy import ScriptedAgent
    from envs.server import Sites
    from envs.taskspec import load_task
    from runner.episode import run_episode
    from traces.store import TraceStore

    task = load_task(Path(__file__).resolve().parents[2] / "tasks" / "shopping_001.yaml")
    foreign = f"http://127.0.0.1:{listener.port}/steal?x=1"
    with Sites(["shopping"]) as sites, TraceStore(tmp_path / "t.sqlite") as store:
        run_id = store.start_run("scripted", "scripted", {"test": True})
        result = run_episode(task, ScriptedAgent([f"goto [{foreign}]", "stop [x]"]), sites, store, run_id)
        stored = store.blocked(result.episode_id)
    assert result.status == "done" and foreign in result.blocked
    assert stored == result.blocked  # every block, in order, under the episode's id
    assert listener.hits == []
