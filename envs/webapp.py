"""Plumbing shared by the self-hosted Flask + SQLite sites (shopping, classifieds, forum).

The three sites look and behave differently on purpose, but the machinery under their pages is the same and used to
be written three times: a fresh sqlite3 connection per request (so an episode reset that rewrites the database file
is seen by the very next request), the signed-in user taken from the session, the `login_required` redirect guard,
the no-open-redirect check on `next`, sign in/out, deterministic password hashing and replacing the DB file before
seeding. One copy here keeps the sites from drifting apart; where the sites really differ (where `next` points after
a POST, whether a stale session is forgotten, the hash string format) the caller passes that choice in explicitly.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import secrets
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, abort, flash, g, redirect, request, session, url_for
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


def install_input_guard(app: Flask) -> None:
    """Check every request with `input_problem` before its view runs; a problem is a 400 with the message."""

    @app.before_request
    def _guard() -> None:
        problem = input_problem(request.args, request.view_args)
        if problem is not None:
            abort(400, description=f"Bad request: {problem}.")


def setup_app(app: Flask) -> None:
    """What every site does to its Flask app: a random secret key and the input guard."""
    app.secret_key = new_secret_key()
    app.config["SECRET_KEY"] = app.secret_key
    install_input_guard(app)


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

def session_user(conn: Callable[[], sqlite3.Connection], *, forget_stale: bool = False) -> sqlite3.Row | None:
    """The signed-in user's `users` row (looked up once per request and kept on `g.user`), or None.

    A session whose user no longer exists (e.g. after a reset to another seed) counts as signed out; with
    `forget_stale` the session is also cleared so the browser drops the dead cookie.
    """
    if "user" not in g:
        uid = session.get("user_id")
        g.user = None if uid is None else conn().execute("SELECT * FROM users WHERE id = ?", (uid,)).fetchone()
        if g.user is None and uid is not None and forget_stale:
            session.clear()
    return g.user


def sign_in(user: sqlite3.Row) -> None:
    """Start a fresh session for `user` (clearing the old one prevents session fixation) and say so."""
    session.clear()
    session["user_id"] = user["id"]
    flash(f"Signed in as {user['display_name']}.")


def sign_out(home_endpoint: str) -> Response:
    """End the session and go to the site's home page."""
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
