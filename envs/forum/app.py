"""Flask application factory for the forum site (a Postmill/Reddit-like board).

Owns the per-request database connection, the session (login/logout) and the `login_required` guard; the pages
themselves live in `browse.py` (reading) and `posting.py` (everything that changes state).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from flask import Flask, abort, flash, g, redirect, render_template, request, session, url_for
from werkzeug.security import check_password_hash

from envs.forum import db

SECRET_KEY = "confkv-forum-fixed-secret"  # fixed so a session cookie stays valid across server restarts


def get_db() -> sqlite3.Connection:
    """One connection per request, opened lazily and closed on teardown."""
    if "db" not in g:
        g.db = db.connect(g.db_path)
    return g.db


def safe_next(target: str | None, default: str = "/") -> str:
    """Only same-site relative paths may be redirect targets (no open redirects to other origins)."""
    if not target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return default
    return target


def login_required(view: Callable) -> Callable:
    """Send anonymous visitors to /login?next=<where they were going>; POSTs come back to their `next` page."""

    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        if g.user is None:
            if request.method == "POST":
                target = safe_next(request.form.get("next"), request.path)
            else:
                target = request.full_path.rstrip("?")
            return redirect(url_for("login", next=target))
        return view(*args, **kwargs)

    return wrapped


def current_page_path() -> str:
    return request.full_path.rstrip("?")


def create_app(db_path: Path) -> Flask:
    """Build the forum app serving the SQLite database at `db_path` (built by `envs.forum.seed.build_db`)."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise FileNotFoundError(f"forum database not found at {db_path}; build it with envs.forum.seed.build_db")
    app = Flask(__name__, template_folder="templates", static_folder="static")
    app.config.update(SECRET_KEY=SECRET_KEY, SESSION_COOKIE_NAME="forum_session")

    @app.before_request
    def load_user() -> None:
        g.db_path = db_path
        user_id = session.get("user_id")
        g.user = db.get_user(get_db(), user_id=user_id) if user_id is not None else None

    @app.teardown_appcontext
    def close_db(_exc: BaseException | None) -> None:
        conn = g.pop("db", None)
        if conn is not None:
            conn.close()

    @app.context_processor
    def template_globals() -> dict:
        return {"user": g.get("user"), "here": current_page_path(), "search_query": request.args.get("q", "")}

    @app.route("/login", methods=["GET", "POST"])
    def login():
        next_url = safe_next(request.values.get("next"))
        error = None
        if request.method == "POST":
            username = request.form.get("username", "").strip()
            password = request.form.get("password", "")
            row = db.get_user(get_db(), username=username) if username else None
            if row is not None and check_password_hash(row["password_hash"], password):
                session.clear()
                session["user_id"] = row["id"]
                flash(f"Signed in as {row['display_name']}.")
                return redirect(next_url)
            error = "Wrong username or password." if username and password else "Enter a username and a password."
        status = 401 if error else 200
        return render_template("login.html", error=error, next_url=next_url), status

    @app.post("/logout")
    def logout():
        session.clear()
        flash("You have signed out.")
        return redirect(url_for("front_page"))

    @app.errorhandler(404)
    def not_found(_err):
        return render_template("message.html", heading="Page not found",
                               text="There is nothing at this address."), 404

    @app.errorhandler(403)
    def forbidden(_err):
        return render_template("message.html", heading="Not allowed",
                               text="You can only edit your own threads and comments."), 403

    from envs.forum import browse, posting

    browse.register(app)
    posting.register(app)
    return app


def require(condition: object) -> None:
    """404 unless `condition` holds: shared by views that look up a thread, forum, comment or user."""
    if not condition:
        abort(404)
