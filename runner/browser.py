"""One confined headless Chromium per episode, driven by Playwright's sync API.

Why this module exists: an agent episode must only reach the task's own sites (confinement), must not leave Chromium
processes behind whatever happens (success, exception, Ctrl-C, crash), and must know which tab the agent is looking
at. Everything else (observations, actions) builds on `BrowserSession`.

Confinement has two layers. The route handler refuses foreign requests the page's fetch machinery makes, with their
URL (what the agent and the trace see). Underneath, Chromium's only way out is `runner.netguard.GuardProxy`, which
connects nowhere but the task's host:port pairs: WebRTC, preconnects, redirects and Chromium's own background calls,
which the route handler never sees, end there.

Playwright's sync API allows one driver per thread, so sessions opened in the same thread share one driver
(reference-counted) and each launches its own Chromium; run parallel episodes in separate threads or processes.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from runner import procs
from runner.netguard import GuardProxy

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, CDPSession, Page, Request, Route

CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # confinement (see runner.netguard): every connection goes through our proxy, loopback included; WebRTC may not
    # send UDP and its TCP goes through the proxy too; no DNS prefetch
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--dns-prefetch-disable",
    "--disable-features=NetworkPrediction,Prefetch,PreloadMediaEngagementData,DnsOverHttps",
)
# Pages get no WebRTC at all: the proxy would refuse it anyway, this keeps it from trying.
_NO_WEBRTC = """(() => { for (const name of ["RTCPeerConnection", "webkitRTCPeerConnection", "RTCDataChannel",
  "RTCIceCandidate", "RTCSessionDescription"]) { try { delete window[name]; } catch (e) {}
  try { Object.defineProperty(window, name, {value: undefined, configurable: false}); } catch (e) {} } })();"""
# Schemes that never leave the machine and that pages legitimately use.
_LOCAL_SCHEMES = {"about", "data", "blob"}
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


_THREAD = threading.local()  # Playwright's sync API allows one driver per thread: sessions in a thread share it


def _acquire_playwright() -> Any:
    from playwright.sync_api import sync_playwright

    if getattr(_THREAD, "playwright", None) is None:
        _THREAD.playwright, _THREAD.users = sync_playwright().start(), 0
    _THREAD.users += 1
    return _THREAD.playwright


def _release_playwright(graceful: bool = True) -> None:
    _THREAD.users -= 1
    if _THREAD.users == 0:
        driver, _THREAD.playwright = _THREAD.playwright, None
        if graceful:  # after an interrupt inside the driver's event loop, stop() can wait forever: just drop it
            driver.stop()


class BrowserCrashed(RuntimeError):
    """The browser process or the active page's renderer died; the episode cannot continue."""


def normalize_origin(url: str) -> str:
    """`scheme://host:port` with the default port made explicit, so 'http://a' and 'http://a:80/x' compare equal."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        raise ValueError(f"not an absolute http(s) URL or origin: {url!r}")
    scheme = parts.scheme.lower()
    port = parts.port or _DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{parts.hostname.lower()}:{port}"


class OriginPolicy:
    """Which URLs a page may load: the task's own origins, local schemes, and file:// only when asked (MiniWoB)."""

    def __init__(self, allowed_origins: Iterable[str], allow_file: bool = False) -> None:
        self.origins = {normalize_origin(o) for o in allowed_origins}
        self.allow_file = allow_file

    def host_ports(self) -> set[tuple[str, int]]:
        """(host, port) pairs the guard proxy may connect to: exactly the allowed origins."""
        out = set()
        for origin in self.origins:
            parts = urlsplit(origin)
            out.add((parts.hostname or "", int(parts.port or 0)))
        return out

    def allows(self, url: str) -> bool:
        scheme = urlsplit(url).scheme.lower()
        if scheme in _LOCAL_SCHEMES:
            return True
        if scheme == "file":
            return self.allow_file
        if scheme in _DEFAULT_PORTS:
            try:
                return normalize_origin(url) in self.origins
            except ValueError:
                return False
        return False


class BrowserSession:
    """Context manager: Playwright + system Chromium + one confined browser context.

    `blocked` lists every URL refused by confinement (requests, navigations, websockets); `refused_downloads` every
    download attempt. `active_page` is the tab the agent acts on; popups that stay on allowed origins become active,
    as in WebArena, and popups that try to reach other hosts are closed.
    """

    def __init__(
        self,
        allowed_origins: list[str],
        headless: bool = True,
        screenshots_dir: Path | str | None = None,
        viewport: tuple[int, int] = (1280, 900),
        allow_file: bool = False,
        timeout_ms: int = 10_000,
    ) -> None:
        self.policy = OriginPolicy(allowed_origins, allow_file=allow_file)
        self.headless = headless
        self.screenshots_dir = Path(screenshots_dir) if screenshots_dir else None
        self.viewport = viewport
        self.timeout_ms = timeout_ms
        self.blocked: list[str] = []
        self.refused_downloads: list[str] = []
        self.marker = f"--confkv-session={uuid.uuid4().hex}"  # ignored by Chromium; identifies our browser in ps
        self._pw: Any = None
        self._browser: Any = None
        self._context: BrowserContext | None = None
        self._active: Page | None = None
        self._foreign_popups: list[Page] = []
        self._cdp: dict[int, CDPSession] = {}
        self._crash: str | None = None
        self._closing = False
        self._root_pids: set[int] = set()
        self._seen_pids: set[int] = set()
        self._navigating: set[int] = set()  # id() of pages whose main-frame navigation has not loaded yet
        self._proxy: GuardProxy | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------------
    def __enter__(self) -> BrowserSession:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(graceful=not (exc_type is not None and issubclass(exc_type, KeyboardInterrupt)))

    def start(self) -> BrowserSession:
        """Launch Chromium and open the first tab. On any failure everything started so far is torn down."""
        try:
            self._pw = _acquire_playwright()
            self._proxy = GuardProxy(self.policy.host_ports(), self._on_proxy_block)
            before = procs.descendants(os.getpid())
            self._browser = self._pw.chromium.launch(
                executable_path=CHROMIUM_PATH, headless=self.headless,
                args=[*CHROMIUM_ARGS, f"--proxy-server={self._proxy.url}", self.marker],
            )
            self._root_pids = procs.descendants(os.getpid()) - before
            self._browser.on("disconnected", self._on_disconnected)
            width, height = self.viewport
            self._context = self._browser.new_context(
                viewport={"width": width, "height": height},
                accept_downloads=False,
                service_workers="block",  # a service worker could fetch around our route handler
            )
            self._context.set_default_timeout(self.timeout_ms)
            self._context.add_init_script(_NO_WEBRTC)
            self._context.route("**/*", self._route)
            self._context.route_web_socket(lambda url: True, self._route_ws)
            self._context.on("page", self._on_page)
            self._context.new_page()
            self.chromium_pids()  # remember the processes spawned so far
        except BaseException as exc:
            self.close(graceful=not isinstance(exc, KeyboardInterrupt))
            raise
        return self

    def chromium_pids(self) -> set[int]:
        """Live pids of this session's Chromium: the launched process(es), their descendants, and every process seen
        in that tree before (a child outlives a killed parent: it is re-parented to init, out of our tree)."""
        parents = procs.parent_map()
        alive = {p for p in self._root_pids | self._seen_pids if p in parents}
        for root in list(alive):
            alive |= procs.descendants(root, parents)
        self._seen_pids |= alive
        return alive

    def close(self, graceful: bool = True) -> None:
        """Close context, browser and Playwright; then SIGKILL any of our Chromium processes still alive.

        Safe to call twice and after a crash; never raises what the driver says, because it runs while another
        exception (or KeyboardInterrupt) may be propagating. `graceful=False` (Ctrl-C / SIGTERM unwinding) makes no
        driver call at all: an interrupt that landed inside Playwright's event loop can leave every later call
        waiting forever, so the Chromium processes are killed and the driver is dropped instead. A Ctrl-C that
        arrives during the close itself switches the rest to that path and is raised again once everything is
        gone: swallowing it here let `tasks check` run on and exit 0 after the user pressed Ctrl-C.
        """
        if self._closing:
            return
        self._closing = True
        leftovers = self.chromium_pids()
        interrupted: KeyboardInterrupt | None = None
        for closer in (self._context, self._browser, self._pw):
            if closer is None or (not graceful and closer is not self._pw):
                continue
            try:
                _release_playwright(graceful) if closer is self._pw else closer.close()
            except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) during the close: finish without the driver
                interrupted, graceful = exc, False
            except BaseException:  # noqa: BLE001 - shutdown must continue whatever the driver says
                pass
        ours = leftovers | self.chromium_pids()
        procs.kill_all(ours, must_contain="chrom")
        procs.wait_gone(ours)
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        self._context = self._browser = self._pw = None
        self._active = None
        if interrupted is not None:
            raise interrupted

    # ---- confinement -----------------------------------------------------------------------------------------------
    def _on_proxy_block(self, what: str) -> None:
        """A connection the route handler never saw (WebRTC, preconnect, ...) reached the guard proxy and was
        refused there; recorded like any other block."""
        self.blocked.append(f"proxy: {what}")

    def _route(self, route: Route, request: Request) -> None:
        url = request.url
        try:
            if self.policy.allows(url):
                route.continue_()
                return
            self.blocked.append(url)
            if request.is_navigation_request() and request.frame.parent_frame is None:
                page = request.frame.page
                if page.opener() is not None and page not in self._foreign_popups:
                    self._foreign_popups.append(page)
            route.abort("blockedbyclient")
        except Exception:  # noqa: BLE001 - the context may be closing under us; nothing to route then
            pass

    def _route_ws(self, ws: Any) -> None:
        if self.policy.allows(ws.url):
            ws.connect_to_server()
        else:
            self.blocked.append(ws.url)
            ws.close()

    def _on_page(self, page: Page) -> None:
        page.on("crash", lambda p: self._set_crash(f"page renderer crashed at {p.url}"))
        page.on("download", lambda d: self.refused_downloads.append(d.url))
        page.on("request", lambda r: self._on_request(page, r, started=True))
        page.on("requestfailed", lambda r: self._on_request(page, r, started=False))
        page.on("load", lambda p: self._navigating.discard(id(p)))
        page.on("close", lambda p: self._cdp.pop(id(p), None))
        self._active = page

    def _on_request(self, page: Page, request: Request, started: bool) -> None:
        """Track main-frame navigations (redirect hops included) until the page's load event or a failure."""
        if request.is_navigation_request() and request.frame == page.main_frame:
            (self._navigating.add if started else self._navigating.discard)(id(page))

    def is_navigating(self, page: Page) -> bool:
        """True between a main-frame navigation request and its load event (or its failure)."""
        return id(page) in self._navigating

    def _set_crash(self, reason: str) -> None:
        if not self._closing and self._crash is None:
            self._crash = reason

    def _on_disconnected(self, *_: object) -> None:
        self._set_crash("browser process disconnected (killed or crashed)")

    def _sweep_popups(self) -> None:
        """Close popups whose navigation to a foreign host was blocked (they would show an error page)."""
        while self._foreign_popups:
            page = self._foreign_popups.pop()
            try:
                page.close()
            except Exception:  # noqa: BLE001 - already closed
                pass
            if self._active is page:
                self._active = None

    # ---- tabs --------------------------------------------------------------------------------------------------
    def check_alive(self) -> None:
        """Raise `BrowserCrashed` if the browser or the active renderer died."""
        if self._crash is not None:
            raise BrowserCrashed(self._crash)
        if self._context is None:
            raise BrowserCrashed("browser session is not running (closed or never started)")

    @property
    def context(self) -> BrowserContext:
        self.check_alive()
        assert self._context is not None
        return self._context

    @property
    def pages(self) -> list[Page]:
        """Open tabs in opening order (foreign popups already closed)."""
        self.check_alive()
        self._sweep_popups()
        return [p for p in self.context.pages if not p.is_closed()]

    @property
    def active_page(self) -> Page:
        pages = self.pages
        if self._active is None or self._active.is_closed() or self._active not in pages:
            self._active = pages[-1] if pages else self.context.new_page()
        return self._active

    def new_tab(self) -> Page:
        page = self.context.new_page()
        self._active = page
        return page

    def tab_focus(self, index: int) -> Page:
        pages = self.pages
        if not 0 <= index < len(pages):
            raise IndexError(f"tab index {index} out of range; open tabs are 0..{len(pages) - 1}")
        self._active = pages[index]
        self._active.bring_to_front()
        return self._active

    def close_tab(self) -> Page:
        """Close the active tab and focus the last remaining one (a blank tab if it was the only one)."""
        self.active_page.close()
        self._active = None
        return self.active_page

    def cdp(self, page: Page | None = None) -> CDPSession:
        """The (cached) CDP session of a tab; used for the accessibility tree and DOM node geometry."""
        page = page or self.active_page
        key = id(page)
        if key not in self._cdp:
            self._cdp[key] = self.context.new_cdp_session(page)
        return self._cdp[key]

    def cdp_send(self, method: str, params: dict[str, Any] | None = None, page: Page | None = None) -> dict[str, Any]:
        """A CDP call on a tab, bounded by `timeout_ms`: a crashed or hung renderer never answers, and an unbounded
        wait would hang the episode. A timeout raises `BrowserCrashed`; protocol errors propagate unchanged."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            return self.cdp(page).send(method, params, timeout=self.timeout_ms)
        except PlaywrightTimeout as exc:
            self.check_alive()
            raise BrowserCrashed(
                f"the page did not answer {method} within {self.timeout_ms} ms (renderer hung)"
            ) from exc

    def screenshot(self, name: str) -> Path | None:
        """Save the active tab as `<screenshots_dir>/<name>.png` when screenshots were asked for."""
        if self.screenshots_dir is None:
            return None
        self.screenshots_dir.mkdir(parents=True, exist_ok=True)
        path = self.screenshots_dir / f"{name}.png"
        self.active_page.screenshot(path=str(path))
        return path
