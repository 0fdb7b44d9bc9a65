"""Flask application factory for the classifieds site.

The app keeps no state in memory: every request opens its own sqlite3 connection to `db_path`, so the episode reset
(which overwrites the database file) takes effect on the very next request. Routes live in `browse.py` (public pages)
and `account.py` (pages that need a signed-in user); this module holds what both share: the connection, the current
user, the login gate and the template filters.
"""

from __future__ import annotations

import functools
import pathlib
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, abort, flash, g, redirect, render_template, request, session, url_for

from envs.classifieds.seed import hash_password

SECRET_KEY = "confkv-classifieds-local-only"  # fixed so sessions survive a server restart within a run
PAGE_SIZE = 20
PRICE_UNITS = {"housing": "per month", "jobs": "per hour"}


def db() -> sqlite3.Connection:
    """The request's connection, opened on first use and closed at teardown."""
    if "db" not in g:
        conn = sqlite3.connect(g.db_path)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        g.db = conn
    return g.db


def current_user() -> sqlite3.Row | None:
    uid = session.get("user_id")
    if uid is None:
        return None
    if "user" not in g:
        g.user = db().execute("SELECT * FROM users WHERE id = ?", (uid,)).fetchone()
        if g.user is None:  # the account vanished (e.g. after a reset to another seed): forget the stale session
            session.clear()
    return g.user


def login_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Send anonymous visitors to the sign-in page, remembering where they wanted to go."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if current_user() is None:
            target = request.full_path.rstrip("?")
            return redirect(url_for("login", next=target))
        return view(*args, **kwargs)

    return wrapped


def safe_next(target: str | None) -> str:
    """Only follow local paths after login, never another host."""
    if not target:
        return url_for("home")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("home")
    return target


def owned_listing(listing_id: int) -> sqlite3.Row:
    """The active listing `listing_id` if the signed-in user owns it; 404 if missing, 403 if someone else's."""
    row = db().execute("SELECT * FROM listings WHERE id = ? AND status = 'active'", (listing_id,)).fetchone()
    if row is None:
        abort(404)
    if row["seller_id"] != current_user()["id"]:
        abort(403)
    return row


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _register_auth(app: Flask) -> None:
    @app.route("/login", methods=["GET", "POST"])
    def login() -> Any:
        error = None
        if request.method == "POST":
            username = request.form.get("username", "").strip()
            password = request.form.get("password", "")
            user = db().execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()
            if user is not None and user["password_hash"] == hash_password(username, password):
                session.clear()
                session["user_id"] = user["id"]
                flash(f"Signed in as {user['display_name']}.")
                return redirect(safe_next(request.form.get("next")))
            error = "Invalid username or password."
        status = 401 if error else 200
        return render_template("login.html", error=error, next=request.values.get("next", "")), status

    @app.route("/logout", methods=["POST"])
    def logout() -> Any:
        session.clear()
        flash("You have signed out.")
        return redirect(url_for("home"))


def create_app(db_path: pathlib.Path) -> Flask:
    """Build the classifieds app serving the database at `db_path` (built by `seed.build_db`)."""
    from envs.classifieds import account, browse

    db_path = pathlib.Path(db_path)
    if not db_path.exists():
        raise FileNotFoundError(f"classifieds database {db_path} does not exist; build it with seed.build_db first")
    app = Flask(__name__)
    app.secret_key = SECRET_KEY
    app.config["DB_PATH"] = str(db_path)
    app.jinja_env.filters["money"] = money
    app.jinja_env.globals["price_units"] = PRICE_UNITS

    @app.before_request
    def _bind_db_path() -> None:
        g.db_path = app.config["DB_PATH"]

    @app.teardown_request
    def _close_db(_exc: BaseException | None) -> None:
        conn = g.pop("db", None)
        if conn is not None:
            conn.close()

    @app.context_processor
    def _inject_user() -> dict[str, Any]:
        user = current_user()
        unread = 0
        if user is not None:
            unread = db().execute(
                "SELECT COUNT(*) FROM messages m JOIN threads t ON t.id = m.thread_id "
                "WHERE m.is_read = 0 AND m.sender_id != ? AND ? IN (t.buyer_id, t.seller_id)",
                (user["id"], user["id"])).fetchone()[0]
        return {"user": user, "unread_count": unread}

    _register_auth(app)
    browse.register(app)
    account.register(app)
    return app
