"""Per-request database access, the signed-in user and small formatting helpers for the shopping views.

A new sqlite3 connection is opened for every request (and closed at teardown) so that an episode reset, which
overwrites the database file's contents, is visible to the very next request.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from flask import current_app, request, url_for

from envs import webapp

PAGE_SIZE = 20


def get_db() -> sqlite3.Connection:
    """The request's connection (rows addressable by column name)."""
    return webapp.request_db(lambda: webapp.open_db(current_app.config["DB_PATH"], timeout=10))


def current_user() -> sqlite3.Row | None:
    """The signed-in user's row, or None; a session whose user vanished (after a reset) counts as signed out."""
    return webapp.session_user(get_db)


def _login_next() -> str:
    """Where to return after login: the page itself for GETs, only the path for form posts (their query is moot)."""
    return (request.full_path if request.method == "GET" else request.path).rstrip("?")


login_required = webapp.login_guard(current_user, "login", _login_next)


def safe_next(target: str | None) -> str:
    """Only same-site relative paths are followed after login (no open redirect)."""
    return webapp.safe_next(target, url_for("home"))


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
