"""OneStopShop: the self-hosted shopping site (VisualWebArena-like) served to the web agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask, render_template
from werkzeug.exceptions import HTTPException

from envs import webapp
from envs.shopping import account, catalog, orders
from envs.shopping.db import cart_count, current_user, get_db, money, url_with

# Fixed so sessions survive a server restart within a benchmark run; the site only listens on 127.0.0.1.


def create_app(db_path: Path) -> Flask:
    """A Flask app over the SQLite file at `db_path` (built by `envs.shopping.seed.build_db`)."""
    db_path = Path(db_path)
    if not db_path.is_file():
        raise FileNotFoundError(f"shopping database {db_path} does not exist; build it with "
                                "envs.shopping.seed.build_db(path, seed)")
    app = Flask(__name__)
    app.config.update(DB_PATH=str(db_path), SESSION_COOKIE_NAME="onestopshop_session")
    webapp.setup_app(app)
    app.teardown_appcontext(webapp.close_request_db)
    for routes in (catalog, orders, account):
        routes.register(app)
    app.add_template_filter(money, "money")
    app.add_template_global(url_with, "url_with")

    @app.context_processor
    def globals_for_templates() -> dict[str, Any]:
        user = current_user()
        categories = get_db().execute("SELECT slug, name FROM categories ORDER BY id").fetchall()
        return {"user": user, "cart_items": cart_count(user["id"]) if user else 0, "all_categories": categories}

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[str, int]:
        return render_template("error.html", code=exc.code, name=exc.name, description=exc.description), exc.code

    return app
