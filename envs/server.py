"""Start, reset and stop the self-hosted sites for the runner, the task checker and the tests.

Each site gets a seeded "template" database built once and cached (keyed by seed and a hash of the site's source),
a private live copy, and a waitress server on 127.0.0.1 on a free port in a daemon thread. `reset()` copies the
template back over the live database with SQLite's backup API, so every episode starts from the same state even
while the server keeps running.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envs.sites import SITES, SiteSpec, get_site
from envs.webapp import restart_site_clock

HOST = "127.0.0.1"
PLACEHOLDER_RE = re.compile(r"__[A-Z][A-Z_]*?__")


def default_cache_dir() -> Path:
    """Where seeded template databases are cached when no workdir is given."""
    root = os.environ.get("CONFKV_SITES_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "confkv-agent", "sites")
    return Path(root)


def _copy_db(src: Path, dst: Path) -> None:
    """Copy one SQLite database over another, page by page; safe while the server holds connections to `dst`."""
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(dst, timeout=30)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def template_db(spec: SiteSpec, seed: int, cache_dir: Path) -> Path:
    """The cached seeded database for `spec`, built on first use (atomically, so parallel builders are safe)."""
    path = cache_dir / "templates" / f"{spec.name}-seed{seed}-{spec.source_hash()}.sqlite"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.name}-", suffix=".sqlite", dir=path.parent)
        os.close(fd)
        try:
            spec.build_db(Path(tmp_name), seed=seed)
            os.replace(tmp_name, path)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
    return path


class _RunningSite:
    """One site's live database and waitress server thread."""

    def __init__(self, spec: SiteSpec, template: Path, live: Path) -> None:
        import waitress

        self.spec, self.template, self.live = spec, template, live
        _copy_db(template, live)
        app = spec.create_app(live)
        self.server: Any = waitress.create_server(app, host=HOST, port=0, threads=4, ident=f"confkv-{spec.name}")
        self.port = int(self.server.effective_port)
        self.app = app
        self.thread = threading.Thread(target=self._serve, name=f"site-{spec.name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.server.run()
        except (OSError, ValueError):  # the socket was closed under the loop by close()
            pass

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def close(self) -> None:
        self.server.task_dispatcher.shutdown()
        self.server.close()
        self.thread.join(timeout=5)


class Sites:
    """Serve some or all sites for the lifetime of the object (or of a `with` block).

    `names`: site names (default: every registered site). `workdir`: where template databases are cached and live
    copies are made (default: a per-user cache for templates and a temporary directory for live copies).
    """

    def __init__(self, names: Iterable[str] | None = None, workdir: str | os.PathLike[str] | None = None,
                 seed: int = 0) -> None:
        self.names = list(dict.fromkeys(names)) if names is not None else list(SITES)
        if not self.names:
            raise ValueError("Sites needs at least one site name")
        self.specs = {name: get_site(name) for name in self.names}
        self.seed = int(seed)
        cache_dir = Path(workdir) if workdir is not None else default_cache_dir()
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._live_dir = Path(tempfile.mkdtemp(prefix="confkv-live-", dir=workdir))
        self._running: dict[str, _RunningSite] = {}
        self._stopped = False
        atexit.register(self.stop)
        try:
            for name, spec in self.specs.items():
                template = template_db(spec, self.seed, cache_dir)
                self._running[name] = _RunningSite(spec, template, self._live_dir / f"{name}.sqlite")
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> Sites:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def urls(self) -> dict[str, str]:
        """Placeholder -> base URL, e.g. {"__SHOPPING__": "http://127.0.0.1:41234"}."""
        return {site.spec.placeholder: site.url for site in self._running.values()}

    def url(self, name: str) -> str:
        """Base URL of one running site."""
        if name not in self._running:
            raise KeyError(f"site '{name}' is not running here; running: {', '.join(self._running) or 'none'}")
        return self._running[name].url

    def db_path(self, name: str) -> Path:
        """The live database of one running site (for tests and debugging)."""
        if name not in self._running:
            raise KeyError(f"site '{name}' is not running here; running: {', '.join(self._running) or 'none'}")
        return self._running[name].live

    def reset(self, names: Iterable[str] | None = None) -> None:
        """Restore the seeded state of the given (default: all) running sites."""
        if self._stopped:
            raise RuntimeError("cannot reset sites that were stopped")
        for name in names if names is not None else list(self._running):
            site = self._running.get(name)
            if site is None:
                raise KeyError(f"site '{name}' is not running here; running: {', '.join(self._running)}")
            _copy_db(site.template, site.live)
            restart_site_clock(site.app)  # the seeded state's times again, as the data

    def stop(self) -> None:
        """Stop every server and delete the live databases; calling it again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        for site in self._running.values():
            site.close()
        shutil.rmtree(self._live_dir, ignore_errors=True)


def expand_url(text: str, urls: dict[str, str]) -> str:
    """Replace site placeholders (`__SHOPPING__`, ...) in `text`; an unknown or not-running one is an error."""
    out = text
    for placeholder, base in urls.items():
        out = out.replace(placeholder, base.rstrip("/"))
    left = sorted(set(PLACEHOLDER_RE.findall(out)))
    if left:
        raise ValueError(f"no running site for placeholder(s) {', '.join(left)} in {text!r}; "
                         f"available: {', '.join(urls) or 'none'}")
    return out


def canonical_origins(text: str, urls: dict[str, str]) -> str:
    """`text` with each running site's origin (an ephemeral port) replaced by its canonical one (`SiteSpec.
    canonical_origin`): two processes replaying one trajectory then feed the model the same tokens, so their scores
    pair. `urls` is `Sites.urls` (placeholder -> running base URL)."""
    by_placeholder = {spec.placeholder: spec.canonical_origin for spec in SITES.values()}
    out = text
    for placeholder, base in urls.items():
        if placeholder in by_placeholder:
            out = re.sub(re.escape(base.rstrip("/")) + r"(?!\d)", by_placeholder[placeholder], out)
    return out


class LoginError(RuntimeError):
    """Signing in through a site's /login form did not work."""


def login(page: Any, base_url: str, username: str = "alex", password: str = "confkv") -> None:
    """Sign a Playwright `page` in through the site's /login form (fields labelled Username/Password)."""
    page.goto(f"{base_url.rstrip('/')}/login")
    page.get_by_label("Username", exact=True).fill(username)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_load_state("load")
    if urlsplit(page.url).path.rstrip("/") == "/login":
        raise LoginError(f"signing in as {username!r} at {base_url} failed (still on {page.url})")
