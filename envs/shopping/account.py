"""Sign in/out, the editable account page and the wishlist."""

from __future__ import annotations

from flask import Flask, abort, flash, redirect, render_template, request, url_for

from envs import webapp
from envs.shopping.db import current_user, get_db, login_required, safe_next
from envs.shopping.seed import hash_password

# Form field -> (label, users column). Every field is required.
ACCOUNT_FIELDS = {"display_name": "Full name", "email": "Email", "phone": "Phone", "street": "Street address",
                  "city": "City", "state": "State", "zip": "ZIP code"}


def _product_id() -> int:
    db = get_db()
    row = db.execute("SELECT id FROM products WHERE id=?", (request.form.get("product_id"),)).fetchone()
    if row is None:
        abort(400, description="The form did not name an existing product.")
    return int(row["id"])


def _change_wishlist(sql: str, message: str) -> int:
    """Run `sql` with (user id, product id from the form) and flash `message`; returns the product id."""
    pid = _product_id()
    db = get_db()
    db.execute(sql, (current_user()["id"], pid))
    db.commit()
    flash(message)
    return pid


def register(app: Flask) -> None:
    """Add this module's routes to the site's app."""

    @app.route("/login", methods=["GET", "POST"])
    def login():
        next_url = request.values.get("next", "")
        if request.method == "GET":
            return render_template("login.html", next_url=next_url, username="")
        username = request.form.get("username", "").strip()
        password = request.form.get("password", "")
        user = get_db().execute("SELECT * FROM users WHERE username=?", (username,)).fetchone()
        if user is None or not webapp.hashes_match(user["password_hash"], hash_password(username, password)):
            flash("Wrong username or password.")
            return render_template("login.html", next_url=next_url, username=username), 401
        webapp.sign_in(user)
        return redirect(safe_next(next_url))

    @app.route("/logout", methods=["POST"])
    def logout():
        return webapp.sign_out("home")

    @app.route("/account", methods=["GET", "POST"])
    @login_required
    def account():
        user = current_user()
        if request.method == "GET":
            return render_template("account.html", values=dict(user), fields=ACCOUNT_FIELDS)
        values = {key: request.form.get(key, "").strip() for key in ACCOUNT_FIELDS}
        missing = [label for key, label in ACCOUNT_FIELDS.items() if not values[key]]
        if "@" not in values["email"]:
            missing.append("a valid Email")
        if missing:
            flash("Please fill in: " + ", ".join(missing) + ".")
            return render_template("account.html", values=values, fields=ACCOUNT_FIELDS), 400
        db = get_db()
        db.execute(f"UPDATE users SET {', '.join(f'{k}=?' for k in ACCOUNT_FIELDS)} WHERE id=?",
                   (*values.values(), user["id"]))
        db.commit()
        flash("Your account details were saved.")
        return redirect(url_for("account"))

    @app.route("/wishlist")
    @login_required
    def wishlist() -> str:
        rows = get_db().execute(
            "SELECT p.* FROM wishlist w JOIN products p ON p.id = w.product_id WHERE w.user_id=? ORDER BY p.name",
            (current_user()["id"],)).fetchall()
        return render_template("wishlist.html", rows=rows)

    @app.route("/wishlist/add", methods=["POST"])
    @login_required
    def wishlist_add():
        pid = _change_wishlist("INSERT OR IGNORE INTO wishlist (user_id, product_id) VALUES (?,?)",
                               "Added to your wishlist.")
        return redirect(url_for("product", product_id=pid))

    @app.route("/wishlist/remove", methods=["POST"])
    @login_required
    def wishlist_remove():
        pid = _change_wishlist("DELETE FROM wishlist WHERE user_id=? AND product_id=?", "Removed from your wishlist.")
        return redirect(request.form.get("back") == "wishlist" and url_for("wishlist")
                        or url_for("product", product_id=pid))
