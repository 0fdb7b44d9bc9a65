"""Plumbing shared by the self-hosted Flask + SQLite sites (shopping, classifieds, forum).

The three sites look and behave differently on purpose, but the machinery under their pages is the same and used to
be written three times: a fresh sqlite3 connection per request (so an episode reset that rewrites the database file
is seen by the very next request), the signed-in user taken from the session, the `login_required` redirect guard,
the no-open-redirect check on `next`, sign in/out, deterministic password hashing and replacing the DB file before
seeding. One copy here keeps the sites from drifting apart; where the sites really differ (where `next` points after
a POST, whether a stale session is forgotten, the hash string format) the caller passes that choice in explicitly.

What the sites defend, all here: hostile query values (`input_problem`: 400), form fields over 10,000 characters and
bodies over 1 MiB, cross-site form posts (`cross_site_problem`: a POST whose Origin or Referer is another origin is
a 403), forged sessions (a random key per app instance) and replayed ones (sign-out ends the session on the server:
`LiveSessions`), and LIKE wildcards in search text (`like_contains`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import secrets
import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, abort, current_app, flash, g, redirect, request, session, url_for
from werkzeug.wrappers import Response

View = Callable[..., Any]


# --- app setup -----------------------------------------------------------------------------------------------------

def new_secret_key() -> str:
    """A random session-signing key per app instance: a key in the source lets anyone forge a session cookie
    (`{"user_id": 3}`) and act as another user. Sessions therefore last as long as the server, which is what an
    episode needs."""
    return secrets.token_hex(32)


# --- hostile input --------------------------------------------------------------------------------------------------

MAX_PAGE = 100_000
MAX_PRICE = 1_000_000_000.0
MAX_ID = 2**53  # ids in paths; SQLite integers stop at 2**63 - 1, and no row here comes near either
MAX_QUERY_WORDS, MAX_QUERY_CHARS = 32, 500  # each word is a LIKE term: SQLite caps expression depth at 1000
MAX_ARG_CHARS = 4000  # any single query-string value
MAX_FORM_CHARS = 10_000  # any single form field (the forum's own cap on a post's body)
MAX_BODY_BYTES = 1 << 20  # a whole request body: Werkzeug answers 413 above it before parsing anything
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PRICE_ARGS = ("min_price", "max_price", "price")
QUERY_ARGS = ("q",)


def input_problem(args: Any, view_args: dict[str, Any] | None) -> str | None:
    """The first input a site cannot answer sensibly, as a message for the user; None when all are fine.

    One rule set for the three sites. It only refuses what would otherwise crash a page or make SQLite give up
    (non-finite or absurd numbers, non-ASCII digits, huge page numbers and ids, search text of thousands of
    words); ordinary mistakes such as `min_price=abc` stay with the sites, which explain them on the page.
    """
    for key in PRICE_ARGS:
        raw = (args.get(key) or "").strip().replace("$", "").replace(",", "")
        try:
            value = float(raw)
        except ValueError:
            continue  # not a number at all: the site's own message
        if not math.isfinite(value) or abs(value) > MAX_PRICE:
            return f"{key} must be a price between 0 and {MAX_PRICE:,.0f}; got {raw[:20]!r}"
    page = (args.get("page") or "").strip()
    exotic_digits = any(ch.isdigit() and not ch.isascii() for ch in page)  # "²" passes isdigit() but not int()
    if exotic_digits or (page.isascii() and page.isdigit() and (len(page) > 9 or int(page) > MAX_PAGE)):
        return f"page must be a whole number from 1 to {MAX_PAGE:,}; got {page[:20]!r}"
    for text in (t for key in QUERY_ARGS for t in args.getlist(key)):
        if len(text) > MAX_QUERY_CHARS or len(text.split()) > MAX_QUERY_WORDS:
            return (f"search text is too long ({len(text.split()):,} words, {len(text):,} characters); "
                    f"use at most {MAX_QUERY_WORDS} words and {MAX_QUERY_CHARS} characters")  # fmt: skip
    for key, value in args.items(multi=True) if hasattr(args, "items") else []:
        if len(value) > MAX_ARG_CHARS:
            return f"the {key!r} parameter is {len(value):,} characters long; at most {MAX_ARG_CHARS:,} are accepted"
    for key, value in (view_args or {}).items():
        if isinstance(value, int) and not 0 <= value <= MAX_ID:
            return f"{key} is out of range (at most {MAX_ID:,})"
    return None


def form_problem(form: Any) -> str | None:
    """The first form field too long to store sensibly (a 2,000,000-character review title was accepted)."""
    for key, value in form.items(multi=True):
        if len(value) > MAX_FORM_CHARS:
            return f"the {key[:40]!r} field is {len(value):,} characters long; at most {MAX_FORM_CHARS:,} are accepted"
    return None


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port with the default made explicit) of a URL or `Origin` value; None when it has none."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def cross_site_problem(method: str, headers: Any, host_url: str) -> str | None:
    """Why a state-changing request must be refused as cross-site (CSRF), or None.

    A POST (any method but GET/HEAD/OPTIONS) must come from this site's own pages: its `Origin`, or without one its
    `Referer`, must name this site's origin; `Origin: null` (sandboxed frames, data: pages) is refused too. Browsers
    send `Origin` on every POST, so a form on http://evil.example that posts here (sign the victim in as someone
    else, add to their cart) is caught, while the agent's own clicks on the site's forms pass unchanged. A request
    with neither header comes from no browser page at all (curl, tests): it cannot ride a victim's cookies, so it is
    let through. The port counts: the three sites share 127.0.0.1, and one site's pages must not post to another."""
    if method.upper() in SAFE_METHODS:
        return None
    origin, referer = headers.get("Origin"), headers.get("Referer")
    claimed = origin if origin is not None else referer
    if claimed is None:
        return None
    if _origin(claimed) == _origin(host_url):
        return None
    source = "Origin" if origin is not None else "Referer"
    return f"cross-site form post refused: the {source} {claimed[:80]!r} is not this site"


def install_input_guard(app: Flask) -> None:
    """Check every request before its view runs: a cross-site post is a 403 (`cross_site_problem`), a hostile
    query value or form field a 400 (`input_problem`, `form_problem`), a body over `MAX_BODY_BYTES` a 413."""
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @app.before_request
    def _guard() -> None:
        problem = cross_site_problem(request.method, request.headers, request.host_url)
        if problem is not None:
            abort(403, description=f"Forbidden: {problem}.")
        problem = input_problem(request.args, request.view_args)
        if problem is None and request.method not in SAFE_METHODS:
            problem = form_problem(request.form)
        if problem is not None:
            abort(400, description=f"Bad request: {problem}.")


def setup_app(app: Flask) -> None:
    """What every site does to its Flask app: a random secret key, the input guard, the live-session table and the
    site clock."""
    app.secret_key = new_secret_key()
    app.config["SECRET_KEY"] = app.secret_key
    app.extensions["live_sessions"] = LiveSessions()
    restart_site_clock(app)
    install_input_guard(app)


# --- time -------------------------------------------------------------------------------------------------------------

#: Where every site's clock starts: after every seeded timestamp (the shopping site's last order is 2024-07-08 10:11).
SITE_CLOCK_START = datetime(2024, 7, 15, 12, 0)


class SiteClock:
    """The time a site stamps on what users create: a fixed start that advances one minute per reading.

    Why not the wall clock: a post's time is on the page, so a replayed reference trajectory showed a different
    text in every process and its forced rows from different processes did not pair (a trajectory is identified by
    the tokens fed). A clock that moves only when read gives every replay of the same steps the same times, while
    new items still sort after the seeded ones and after each other. `Sites.reset` restarts it with the data."""

    def __init__(self, start: datetime = SITE_CLOCK_START) -> None:
        self._next = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            moment, self._next = self._next, self._next + timedelta(minutes=1)
        return moment


def restart_site_clock(app: Flask) -> None:
    """A fresh `SiteClock` for `app`: at start-up, and with the seeded data on every reset."""
    app.extensions["site_clock"] = SiteClock()


def site_now() -> datetime:
    """The current request's site time (`SiteClock`)."""
    return current_app.extensions["site_clock"].now()


# --- search text ----------------------------------------------------------------------------------------------------

#: The LIKE operator with `\` as its escape character, for `like_contains` patterns: `f"p.name {LIKE}"`.
LIKE = "LIKE ? ESCAPE '\\'"


def like_contains(term: str) -> str:
    """A LIKE pattern matching `term` literally anywhere (use with `LIKE`): `%` and `_` typed into a search box are
    characters, not wildcards (`q=%` matched every row, `q=m_g` matched "mug")."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --- database ------------------------------------------------------------------------------------------------------

def open_db(db_path: str | Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection whose rows are addressable by column name and which enforces foreign keys (off by default)."""
    conn = sqlite3.connect(db_path, timeout=timeout)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def request_db(open_conn: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
    """The current request's connection, opened with `open_conn` on first use; `close_request_db` closes it.

    Nothing survives between requests, so a reset that overwrites the DB file takes effect at once.
    """
    if "db" not in g:
        g.db = open_conn()
    return g.db


def close_request_db(_exc: BaseException | None = None) -> None:
    """Teardown hook for `request_db`: close the request's connection if one was opened."""
    conn = g.pop("db", None)
    if conn is not None:
        conn.close()


def fresh_db_file(db_path: str | Path) -> Path:
    """Prepare `db_path` for seeding: parent folders exist and no old file remains, so the build starts empty and
    the same seed always produces the same bytes."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if db_path.exists():
        db_path.unlink()
    return db_path


# --- signed-in user ------------------------------------------------------------------------------------------------

class LiveSessions:
    """Which signed sessions are still signed in: session id -> user id, on the app instance.

    Why: a Flask session is a signed cookie, valid for as long as the key; clearing it at sign-out only asks the
    browser to forget it, and a copy saved before still opened /orders afterwards. Each sign-in gets a random id
    here and in the cookie, sign-out removes it, and a cookie whose id is not here is signed out. In memory on
    purpose: a site lives for one server (its key is random per instance too), so a restart signs everyone out,
    which is what a fresh episode needs; the oldest sessions beyond `limit` are dropped."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._users: dict[str, int] = {}
        self._lock = threading.Lock()  # waitress serves each site from several threads

    def start(self, user_id: int) -> str:
        sid = secrets.token_urlsafe(24)
        with self._lock:
            self._users[sid] = user_id
            while len(self._users) > self.limit:
                del self._users[next(iter(self._users))]
        return sid

    def user(self, sid: object) -> int | None:
        return self._users.get(sid) if isinstance(sid, str) else None

    def end(self, sid: object) -> None:
        if isinstance(sid, str):
            with self._lock:
                self._users.pop(sid, None)


def _live_sessions() -> LiveSessions:
    return current_app.extensions["live_sessions"]


def session_user(conn: Callable[[], sqlite3.Connection], *, forget_stale: bool = False) -> sqlite3.Row | None:
    """The signed-in user's `users` row (looked up once per request and kept on `g.user`), or None.

    A session that was signed out (or never signed in through `sign_in`) is cleared and counts as signed out. A
    session whose user no longer exists (e.g. after a reset to another seed) counts as signed out too; with
    `forget_stale` it is also cleared so the browser drops the dead cookie.
    """
    if "user" not in g:
        uid = session.get("user_id")
        if uid is not None and _live_sessions().user(session.get("sid")) != uid:
            session.clear()  # signed out on the server: a saved copy of the cookie must not sign anyone in
            uid = None
        g.user = None if uid is None else conn().execute("SELECT * FROM users WHERE id = ?", (uid,)).fetchone()
        if g.user is None and uid is not None and forget_stale:
            session.clear()
    return g.user


def sign_in(user: sqlite3.Row) -> None:
    """Start a fresh session for `user` (clearing the old one prevents session fixation) and say so."""
    _live_sessions().end(session.get("sid"))
    session.clear()
    session["user_id"] = user["id"]
    session["sid"] = _live_sessions().start(user["id"])
    flash(f"Signed in as {user['display_name']}.")


def sign_out(home_endpoint: str) -> Response:
    """End the session on the server too (`LiveSessions`), then in the browser, and go to the home page."""
    _live_sessions().end(session.get("sid"))
    session.clear()
    flash("You have signed out.")
    return redirect(url_for(home_endpoint))


def current_path() -> str:
    """The requested path with its query string, without the bare "?" Werkzeug appends when there is none."""
    return request.full_path.rstrip("?")


def safe_next(target: str | None, default: str) -> str:
    """`target` if it is a same-site relative path, else `default`: a `next` parameter must never redirect to
    another host (no open redirect)."""
    if not target:
        return default
    parts = urlsplit(target)  # also catches "/\t/host", which urlsplit (like browsers) reads as "//host"
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return default
    return target


def login_guard(user: Callable[[], object], login_endpoint: str,
                next_target: Callable[[], str] = current_path) -> Callable[[View], View]:
    """Build a `login_required` decorator: anonymous visitors (`user()` is None) are redirected to
    `login_endpoint` with `next=next_target()`, so they land where they were going after signing in."""

    def login_required(view: View) -> View:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if user() is None:
                return redirect(url_for(login_endpoint, next=next_target()))
            return view(*args, **kwargs)

        return wrapped

    return login_required


# --- passwords -----------------------------------------------------------------------------------------------------

def pbkdf2_hex(password: str, salt: str, iterations: int) -> str:
    """PBKDF2-HMAC-SHA256 as hex. The salt is chosen by the caller (derived from the seed or the username) rather
    than drawn at random, so seeding the same DB twice gives byte-identical files; still not plaintext."""
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations).hex()


def hashes_match(stored: str, candidate: str) -> bool:
    """Constant-time comparison of a stored password hash with one computed from the submitted password."""
    return hmac.compare_digest(stored.encode(), candidate.encode())
