"""What the forum's route modules share: the request's connection, safe redirects, the login guard and `require`.
Kept apart from `app.py`, which imports the route modules to register them: the routes import from here, never
from the app factory, so the package has no import cycle (tests/test_layering.py)."""

from __future__ import annotations

import sqlite3

from flask import abort, g, request

from envs import webapp
from envs.forum import db


def get_db() -> sqlite3.Connection:
    """One connection per request, opened lazily and closed on teardown."""
    return webapp.request_db(lambda: db.connect(g.db_path))


def safe_next(target: str | None, default: str = "/") -> str:
    """Only same-site relative paths may be redirect targets (no open redirects to other origins)."""
    return webapp.safe_next(target, default)


def _login_next() -> str:
    """POSTs come back to the page named by their `next` field (the form's page), other requests to themselves."""
    if request.method == "POST":
        return safe_next(request.form.get("next"), request.path)
    return webapp.current_path()


# Send anonymous visitors to /login?next=<where they were going>.
login_required = webapp.login_guard(lambda: g.user, "login", _login_next)


def require(condition: object) -> None:
    """404 unless `condition` holds: shared by views that look up a thread, forum, comment or user."""
    if not condition:
        abort(404)
