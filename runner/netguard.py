"""A filtering HTTP proxy on 127.0.0.1 that is Chromium's only way out: confinement by construction.

Why a proxy and not only Playwright's route handler: the route handler sees what the page's fetch machinery sees,
and nothing else. WebRTC (STUN/TURN), DNS prefetch, preconnect on navigation start and speculative requests never
pass through it, so a `data:` page with an `RTCPeerConnection` reached any port on the machine. With
`--proxy-server` pointing here and `--proxy-bypass-list=<-loopback>` (loopback goes through the proxy too), every
connection Chromium opens is to this server, and this server opens an upstream connection only to one of the task's
`host:port` pairs. Anything else is answered 403 here and recorded; no byte of it leaves the proxy, and no upstream
connection is ever attempted. WebRTC is held to the same rule by `disable_non_proxied_udp` (no UDP; TCP only
through the proxy, which refuses it).

Plain `http://` requests arrive as absolute-form request lines; they are relayed to the one allowed upstream
with `Connection: close`, so a kept-alive client socket can never be re-pointed at another host.
"""

from __future__ import annotations

import select
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024  # request line + headers; more than that is not a browser talking
_HOP_HEADERS = (b"connection:", b"proxy-connection:", b"keep-alive:", b"proxy-authorization:")


def parse_hostport(text: str, default_port: int) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets allowed) -> (lowercased host, port)."""
    parts = urlsplit(f"//{text}")
    if not parts.hostname:
        raise ValueError(f"no host in {text!r}")
    return parts.hostname.lower(), parts.port or default_port


class GuardProxy:
    """Threaded proxy on 127.0.0.1:<free port>; `allowed` is a set of (host, port); `on_block(description)` is
    called for every refused request (CONNECT target or absolute URL)."""

    def __init__(self, allowed: Iterable[tuple[str, int]], on_block: Callable[[str], None]) -> None:
        self.allowed = {(h.lower(), int(p)) for h, p in allowed}
        self.on_block = on_block
        guard = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                guard._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="confkv-guard", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------------------------------------ one client
    def _handle(self, client: socket.socket) -> None:
        client.settimeout(30)
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            line, _, headers = head.partition(b"\r\n")
            method, target, version = (line.split(b" ") + [b"", b""])[:3]
            method_s, target_s = method.decode("latin-1").upper(), target.decode("latin-1")
            if method_s == "CONNECT":
                host, port = parse_hostport(target_s, 443)
                if (host, port) not in self.allowed:
                    return self._refuse(client, f"CONNECT {target_s}")
                upstream = socket.create_connection((host, port), timeout=30)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                parts = urlsplit(target_s)
                if parts.scheme != "http" or not parts.hostname:
                    return self._refuse(client, f"{method_s} {target_s[:200]}")
                host, port = parts.hostname.lower(), parts.port or 80
                if (host, port) not in self.allowed:
                    return self._refuse(client, f"{method_s} {target_s[:200]}")
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [h for h in headers.split(b"\r\n") if h and not h.lower().startswith(_HOP_HEADERS)]
                request = b"\r\n".join([method + b" " + path.encode("latin-1") + b" " + version, *kept,
                                        b"Connection: close", b"", b""])  # fmt: skip
                upstream = socket.create_connection((host, port), timeout=30)
                upstream.sendall(request + rest)
            _relay(client, upstream)
        except (OSError, ValueError):
            pass
        finally:
            try:
                client.close()
            except OSError:
                pass

    def _refuse(self, client: socket.socket, what: str) -> None:
        self.on_block(what)
        body = b"blocked by confkv confinement: not one of the task's sites\n"
        client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    """Read up to the blank line ending the headers; (None, b"") when the client closes or sends garbage."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _MAX_HEAD:
            return None, b""
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    try:
        socks = [a, b]
        while True:
            readable, _, errored = select.select(socks, [], socks, 60)
            if errored or not readable:
                return
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)
    finally:
        b.close()
