"""What the classifieds route modules share: the request's connection, the current user, the login gate and the
owner check. Kept apart from `app.py`, which imports the route modules to register them: the routes import from
here, never from the app factory, so the package has no import cycle (tests/test_layering.py)."""

from __future__ import annotations

import sqlite3

from flask import abort, current_app, url_for

from envs import webapp

PAGE_SIZE = 20


def db() -> sqlite3.Connection:
    """The request's connection, opened on first use and closed at teardown."""
    return webapp.request_db(lambda: webapp.open_db(current_app.config["DB_PATH"]))


def current_user() -> sqlite3.Row | None:
    """The signed-in user; a session whose account vanished (e.g. after a reset to another seed) is forgotten."""
    return webapp.session_user(db, forget_stale=True)


login_required = webapp.login_guard(current_user, "login")


def safe_next(target: str | None) -> str:
    """Only follow local paths after login, never another host."""
    return webapp.safe_next(target, url_for("home"))


def owned_listing(listing_id: int) -> sqlite3.Row:
    """The active listing `listing_id` if the signed-in user owns it; 404 if missing, 403 if someone else's."""
    row = db().execute("SELECT * FROM listings WHERE id = ? AND status = 'active'", (listing_id,)).fetchone()
    if row is None:
        abort(404)
    if row["seller_id"] != current_user()["id"]:
        abort(403)
    return row
