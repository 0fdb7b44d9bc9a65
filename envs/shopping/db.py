"""Per-request database access, the signed-in user and small formatting helpers for the shopping views.

A new sqlite3 connection is opened for every request (and closed at teardown) so that an episode reset, which
overwrites the database file's contents, is visible to the very next request.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from flask import current_app, g, redirect, request, session, url_for

PAGE_SIZE = 20


def get_db() -> sqlite3.Connection:
    """The request's connection (rows addressable by column name)."""
    if "db" not in g:
        conn = sqlite3.connect(current_app.config["DB_PATH"], timeout=10)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        g.db = conn
    return g.db


def close_db(_exc: BaseException | None = None) -> None:
    conn = g.pop("db", None)
    if conn is not None:
        conn.close()


def current_user() -> sqlite3.Row | None:
    """The signed-in user's row, or None; a session whose user vanished (after a reset) counts as signed out."""
    if "user" not in g:
        uid = session.get("user_id")
        g.user = get_db().execute("SELECT * FROM users WHERE id=?", (uid,)).fetchone() if uid else None
    return g.user


def login_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Send anonymous visitors to the login form, remembering where they were going."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if current_user() is None:
            target = request.full_path if request.method == "GET" else request.path
            return redirect(url_for("account.login", next=target.rstrip("?")))
        return view(*args, **kwargs)

    return wrapped


def safe_next(target: str | None) -> str:
    """Only same-site relative paths are followed after login (no open redirect)."""
    if not target:
        return url_for("catalog.home")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("catalog.home")
    return target


def money(cents: int) -> str:
    """Cents to a display price: 123456 -> "$1,234.56"."""
    return f"${cents / 100:,.2f}"


def parse_page(raw: str | None) -> int:
    """Page numbers from the query string; anything that is not a positive integer means page 1."""
    try:
        return max(1, int(raw or 1))
    except ValueError:
        return 1


def page_count(total: int) -> int:
    return max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)


def cart_count(user_id: int) -> int:
    row = get_db().execute("SELECT COALESCE(SUM(quantity), 0) FROM cart_items WHERE user_id=?", (user_id,)).fetchone()
    return int(row[0])


def url_with(endpoint: str, *param_dicts: dict[str, Any], **params: Any) -> str:
    """`url_for` with several parameter dicts merged (Jinja allows only one `**` per call)."""
    merged: dict[str, Any] = {}
    for extra in param_dicts:
        merged.update(extra)
    merged.update(params)
    return url_for(endpoint, **merged)
