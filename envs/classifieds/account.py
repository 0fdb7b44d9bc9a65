"""Pages that need a signed-in user: post/edit/delete listings, messages, favourites.

Every state change is a POST followed by a redirect, so a reload never repeats it and evaluators can read the result
from the page the browser lands on.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, abort, flash, redirect, render_template, request, url_for

from envs.classifieds.browse import CONDITIONS, LISTING_COLUMNS
from envs.classifieds.web import current_user, db, login_required, owned_listing
from envs.webapp import site_now

MAX_TITLE = 120
MAX_TEXT = 4000


def _now() -> str:
    return site_now().strftime("%Y-%m-%d %H:%M")


def _categories() -> list[Any]:
    return db().execute("SELECT id, slug, name FROM categories ORDER BY id").fetchall()


def validate_listing_form(form: Any) -> tuple[dict[str, Any], list[str]]:
    """Clean the post/edit form; return (values, errors). Prices accept "$1,250" as well as "1250.00"."""
    errors: list[str] = []
    values: dict[str, Any] = {k: form.get(k, "").strip() for k in
                              ("title", "category", "price", "condition", "location", "description", "image_alt")}
    if not values["title"]:
        errors.append("Title is required.")
    elif len(values["title"]) > MAX_TITLE:
        errors.append(f"Title must be at most {MAX_TITLE} characters.")
    slugs = {c["slug"]: c["id"] for c in _categories()}
    if values["category"] not in slugs:
        errors.append("Choose a category.")
    else:
        values["category_id"] = slugs[values["category"]]
    raw_price = values["price"].replace("$", "").replace(",", "")
    try:
        price = float(raw_price)
        if price < 0 or price > 10_000_000:
            raise ValueError
        values["price_cents"] = round(price * 100)
    except ValueError:
        errors.append(f"Price must be a non-negative number of dollars, got {values['price']!r}.")
    if values["condition"] and values["condition"] not in CONDITIONS:
        errors.append(f"Unknown condition {values['condition']!r}.")
    if not values["location"]:
        errors.append("Location is required.")
    if not values["description"]:
        errors.append("Description is required.")
    elif len(values["description"]) > MAX_TEXT:
        errors.append(f"Description must be at most {MAX_TEXT} characters.")
    return values, errors


def _message_body(form: Any, field: str) -> str | None:
    body = form.get(field, "").strip()
    if not body:
        flash("The message is empty; type something before sending.", "error")
        return None
    return body[:MAX_TEXT]


def _register_listing_forms(app: Flask) -> None:
    @app.route("/listings/new", methods=["GET", "POST"])
    @login_required
    def new_listing() -> Any:
        values: dict[str, Any] = {"location": current_user()["location"]}
        errors: list[str] = []
        if request.method == "POST":
            values, errors = validate_listing_form(request.form)
            if not errors:
                cur = db().execute(
                    "INSERT INTO listings (seller_id, category_id, title, price_cents, condition, location, "
                    "posted_at, description, image_alt) VALUES (?,?,?,?,?,?,?,?,?)",
                    (current_user()["id"], values["category_id"], values["title"], values["price_cents"],
                     values["condition"] or None, values["location"], _now(), values["description"],
                     values["image_alt"] or f"Photo of the {values['title']}"))
                db().commit()
                flash("Your listing has been posted.")
                return redirect(url_for("listing", listing_id=cur.lastrowid))
        return render_template("listing_form.html", values=values, errors=errors, categories=_categories(),
                               conditions=CONDITIONS, editing=None), 400 if errors else 200

    @app.route("/listing/<int:listing_id>/edit", methods=["GET", "POST"])
    @login_required
    def edit_listing(listing_id: int) -> Any:
        row = owned_listing(listing_id)
        cat = db().execute("SELECT slug FROM categories WHERE id = ?", (row["category_id"],)).fetchone()
        values: dict[str, Any] = {**dict(row), "category": cat["slug"], "price": f"{row['price_cents'] / 100:.2f}",
                                  "condition": row["condition"] or ""}
        errors: list[str] = []
        if request.method == "POST":
            values, errors = validate_listing_form(request.form)
            if not errors:
                db().execute(
                    "UPDATE listings SET category_id=?, title=?, price_cents=?, condition=?, location=?, "
                    "description=?, image_alt=? WHERE id=?",
                    (values["category_id"], values["title"], values["price_cents"], values["condition"] or None,
                     values["location"], values["description"], values["image_alt"] or row["image_alt"],
                     listing_id))
                db().commit()
                flash("Your changes have been saved.")
                return redirect(url_for("listing", listing_id=listing_id))
        return render_template("listing_form.html", values=values, errors=errors, categories=_categories(),
                               conditions=CONDITIONS, editing=row), 400 if errors else 200

    @app.route("/listing/<int:listing_id>/delete", methods=["POST"])
    @login_required
    def delete_listing(listing_id: int) -> Any:
        row = owned_listing(listing_id)
        db().execute("UPDATE listings SET status = 'deleted' WHERE id = ?", (listing_id,))
        db().commit()
        flash(f"Deleted “{row['title']}”.")
        return redirect(url_for("my_listings"))

    @app.route("/my-listings")
    @login_required
    def my_listings() -> Any:
        rows = db().execute(
            f"SELECT {LISTING_COLUMNS} FROM listings l JOIN categories c ON c.id = l.category_id "
            "WHERE l.seller_id = ? AND l.status = 'active' ORDER BY l.posted_at DESC, l.id DESC",
            (current_user()["id"],)).fetchall()
        return render_template("my_listings.html", rows=rows)


def _register_messages(app: Flask) -> None:
    @app.route("/messages")
    @login_required
    def inbox() -> Any:
        uid = current_user()["id"]
        threads = db().execute(
            "SELECT t.id, l.title AS listing_title, l.id AS listing_id, "
            "CASE WHEN t.buyer_id = :u THEN s.display_name ELSE b.display_name END AS other_name, "
            "CASE WHEN t.buyer_id = :u THEN 'Buying' ELSE 'Selling' END AS role, "
            "MAX(m.sent_at) AS last_at, SUM(m.is_read = 0 AND m.sender_id != :u) AS unread, COUNT(m.id) AS n "
            "FROM threads t JOIN listings l ON l.id = t.listing_id JOIN users b ON b.id = t.buyer_id "
            "JOIN users s ON s.id = t.seller_id JOIN messages m ON m.thread_id = t.id "
            "WHERE :u IN (t.buyer_id, t.seller_id) GROUP BY t.id ORDER BY last_at DESC, t.id DESC",
            {"u": uid}).fetchall()
        return render_template("inbox.html", threads=threads)

    @app.route("/messages/<int:thread_id>")
    @login_required
    def thread(thread_id: int) -> Any:
        uid = current_user()["id"]
        row = db().execute(
            "SELECT t.*, l.title AS listing_title, l.status AS listing_status FROM threads t "
            "JOIN listings l ON l.id = t.listing_id WHERE t.id = ?", (thread_id,)).fetchone()
        if row is None or uid not in (row["buyer_id"], row["seller_id"]):
            abort(404, description="No such conversation in your inbox.")
        messages = db().execute(
            "SELECT m.*, u.display_name, u.username FROM messages m JOIN users u ON u.id = m.sender_id "
            "WHERE m.thread_id = ? ORDER BY m.sent_at, m.id", (thread_id,)).fetchall()
        db().execute("UPDATE messages SET is_read = 1 WHERE thread_id = ? AND sender_id != ?", (thread_id, uid))
        db().commit()
        other_id = row["seller_id"] if row["buyer_id"] == uid else row["buyer_id"]
        other = db().execute("SELECT display_name, username FROM users WHERE id = ?", (other_id,)).fetchone()
        return render_template("thread.html", thread=row, messages=messages, other=other)

    @app.route("/messages/<int:thread_id>/reply", methods=["POST"])
    @login_required
    def reply(thread_id: int) -> Any:
        uid = current_user()["id"]
        row = db().execute("SELECT * FROM threads WHERE id = ?", (thread_id,)).fetchone()
        if row is None or uid not in (row["buyer_id"], row["seller_id"]):
            abort(404, description="No such conversation in your inbox.")
        body = _message_body(request.form, "body")
        if body is not None:
            db().execute("INSERT INTO messages (thread_id, sender_id, body, sent_at, is_read) VALUES (?,?,?,?,1)",
                         (thread_id, uid, body, _now()))
            db().commit()
            flash("Reply sent.")
        return redirect(url_for("thread", thread_id=thread_id))

    @app.route("/listing/<int:listing_id>/contact", methods=["POST"])
    @login_required
    def contact(listing_id: int) -> Any:
        uid = current_user()["id"]
        row = db().execute("SELECT * FROM listings WHERE id = ? AND status = 'active'", (listing_id,)).fetchone()
        if row is None:
            abort(404, description="No such listing.")
        if row["seller_id"] == uid:
            flash("This is your own listing; you cannot message yourself.", "error")
            return redirect(url_for("listing", listing_id=listing_id))
        body = _message_body(request.form, "body")
        if body is None:
            return redirect(url_for("listing", listing_id=listing_id))
        found = db().execute("SELECT id FROM threads WHERE listing_id = ? AND buyer_id = ?",
                             (listing_id, uid)).fetchone()
        if found is None:
            tid = db().execute("INSERT INTO threads (listing_id, buyer_id, seller_id, subject) VALUES (?,?,?,?)",
                               (listing_id, uid, row["seller_id"], f"About: {row['title']}")).lastrowid
        else:
            tid = found["id"]
        db().execute("INSERT INTO messages (thread_id, sender_id, body, sent_at, is_read) VALUES (?,?,?,?,1)",
                     (tid, uid, body, _now()))
        db().commit()
        flash("Your message was sent to the seller.")
        return redirect(url_for("thread", thread_id=tid))


def _register_favourites(app: Flask) -> None:
    @app.route("/listing/<int:listing_id>/favourite", methods=["POST"])
    @login_required
    def toggle_favourite(listing_id: int) -> Any:
        uid = current_user()["id"]
        if db().execute("SELECT 1 FROM listings WHERE id = ? AND status = 'active'", (listing_id,)).fetchone() is None:
            abort(404, description="No such listing.")
        if db().execute("DELETE FROM favourites WHERE user_id = ? AND listing_id = ?", (uid, listing_id)).rowcount:
            flash("Removed from your favourites.")
        else:
            db().execute("INSERT INTO favourites VALUES (?, ?)", (uid, listing_id))
            flash("Saved to your favourites.")
        db().commit()
        return redirect(url_for("listing", listing_id=listing_id))

    @app.route("/favourites")
    @login_required
    def favourites() -> Any:
        rows = db().execute(
            f"SELECT {LISTING_COLUMNS} FROM favourites f JOIN listings l ON l.id = f.listing_id "
            "JOIN categories c ON c.id = l.category_id WHERE f.user_id = ? AND l.status = 'active' "
            "ORDER BY l.posted_at DESC, l.id DESC", (current_user()["id"],)).fetchall()
        return render_template("favourites.html", rows=rows)


def register(app: Flask) -> None:
    _register_listing_forms(app)
    _register_messages(app)
    _register_favourites(app)
