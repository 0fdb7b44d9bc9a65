"""Flask application factory for the forum site (a Postmill/Reddit-like board).

Builds the app (sessions, error pages, sign-in and sign-out) and registers the pages, which live in `browse.py`
(reading) and `posting.py` (everything that changes state); what they share (the per-request connection, the
`login_required` guard, `require`) lives in `web.py`.
"""

from __future__ import annotations

from pathlib import Path

from flask import Flask, g, redirect, render_template, request
from werkzeug.exceptions import Forbidden
from werkzeug.security import check_password_hash

from envs import webapp
from envs.forum import browse, db, posting
from envs.forum.web import get_db, safe_next


def create_app(db_path: Path) -> Flask:
    """Build the forum app serving the SQLite database at `db_path` (built by `envs.forum.seed.build_db`)."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise FileNotFoundError(f"forum database not found at {db_path}; build it with envs.forum.seed.build_db")
    app = Flask(__name__, template_folder="templates", static_folder="static")
    app.config.update(SESSION_COOKIE_NAME="forum_session")
    webapp.setup_app(app)

    @app.before_request
    def load_user() -> None:
        g.db_path = db_path
        g.pop("user", None)  # re-read every request, even when an outer app context keeps `g` alive between them
        webapp.session_user(get_db)  # sets g.user, which the views and templates read

    app.teardown_appcontext(webapp.close_request_db)

    @app.context_processor
    def template_globals() -> dict:
        return {"user": g.get("user"), "here": webapp.current_path(), "search_query": request.args.get("q", "")}

    @app.errorhandler(404)
    def not_found(_err):
        return render_template("message.html", heading="Page not found",
                               text="There is nothing at this address."), 404

    @app.errorhandler(403)
    def forbidden(err):
        ours = err.description != Forbidden.description  # a reason given on purpose, e.g. a cross-site post
        text = err.description if ours else "You can only edit your own threads and comments."
        return render_template("message.html", heading="Not allowed", text=text), 403

    _register_auth(app)
    browse.register(app)
    posting.register(app)
    return app


def _register_auth(app: Flask) -> None:
    """Sign in and out (the form every site shares: `username`, `password`, `next`)."""

    @app.route("/login", methods=["GET", "POST"])
    def login():
        next_url = safe_next(request.values.get("next"))
        error = None
        if request.method == "POST":
            username = request.form.get("username", "").strip()
            password = request.form.get("password", "")
            row = db.get_user(get_db(), username=username) if username else None
            if row is not None and check_password_hash(row["password_hash"], password):
                webapp.sign_in(row)
                return redirect(next_url)
            error = "Wrong username or password." if username and password else "Enter a username and a password."
        status = 401 if error else 200
        return render_template("login.html", error=error, next_url=next_url), status

    @app.post("/logout")
    def logout():
        return webapp.sign_out("front_page")

