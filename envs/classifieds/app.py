"""Flask application factory for the classifieds site.

The app keeps no state in memory: every request opens its own sqlite3 connection to `db_path`, so the episode reset
(which overwrites the database file) takes effect on the very next request. Routes live in `browse.py` (public pages)
and `account.py` (pages that need a signed-in user); what both share (the connection, the current user, the login
gate, the owner check) lives in `web.py`; this module builds the app (sign-in pages, template filters) and registers
the route modules.
"""

from __future__ import annotations

import pathlib
from typing import Any

from flask import Flask, redirect, render_template, request

from envs import webapp
from envs.classifieds import account, browse
from envs.classifieds.seed import hash_password
from envs.classifieds.web import current_user, db, safe_next

PRICE_UNITS = {"housing": "per month", "jobs": "per hour"}


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
            if user is not None and webapp.hashes_match(user["password_hash"], hash_password(username, password)):
                webapp.sign_in(user)
                return redirect(safe_next(request.form.get("next")))
            error = "Invalid username or password."
        status = 401 if error else 200
        return render_template("login.html", error=error, next=request.values.get("next", "")), status

    @app.route("/logout", methods=["POST"])
    def logout() -> Any:
        return webapp.sign_out("home")


def create_app(db_path: pathlib.Path) -> Flask:
    """Build the classifieds app serving the database at `db_path` (built by `seed.build_db`)."""
    db_path = pathlib.Path(db_path)
    if not db_path.exists():
        raise FileNotFoundError(f"classifieds database {db_path} does not exist; build it with seed.build_db first")
    app = Flask(__name__)
    webapp.setup_app(app)
    app.config["DB_PATH"] = str(db_path)
    app.jinja_env.filters["money"] = money
    app.jinja_env.globals["price_units"] = PRICE_UNITS

    app.teardown_request(webapp.close_request_db)

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
