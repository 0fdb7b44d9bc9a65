"""Cart, checkout and order history: the state-changing heart of the shop."""

from __future__ import annotations

import sqlite3

from flask import Flask, abort, flash, redirect, render_template, request, url_for

from envs.shopping.db import PAGE_SIZE, current_user, get_db, login_required, page_count, parse_page
from envs.shopping.seed import shipping_for
from envs.webapp import site_now

ADDRESS_FIELDS = {"ship_name": "Full name", "ship_street": "Street address", "ship_city": "City",
                  "ship_state": "State", "ship_zip": "ZIP code"}
MAX_QUANTITY = 99


def _cart_rows(db: sqlite3.Connection, user_id: int) -> list[sqlite3.Row]:
    return db.execute(
        "SELECT p.id, p.name, p.sku, p.price_cents, p.stock, ci.quantity, p.price_cents * ci.quantity AS line_cents"
        " FROM cart_items ci JOIN products p ON p.id = ci.product_id WHERE ci.user_id=? ORDER BY p.name",
        (user_id,)).fetchall()


def _quantity(raw: str | None) -> int | None:
    """A whole number 0..99 from a form, or None (and a message for the user) if it is not one."""
    try:
        value = int((raw or "").strip())
    except ValueError:
        flash(f"Quantity must be a whole number; got '{raw}'.")
        return None
    if not 0 <= value <= MAX_QUANTITY:
        flash(f"Quantity must be between 0 and {MAX_QUANTITY}.")
        return None
    return value


def _product_or_404(db: sqlite3.Connection, raw_id: str | None) -> sqlite3.Row:
    row = db.execute("SELECT * FROM products WHERE id=?", (raw_id,)).fetchone() if raw_id else None
    if row is None:
        abort(400, description="The form did not name an existing product.")
    return row


def _own_order(number: str) -> sqlite3.Row:
    order = get_db().execute("SELECT * FROM orders WHERE number=? AND user_id=?",
                             (number, current_user()["id"])).fetchone()
    if order is None:
        abort(404, description=f"You have no order #{number}.")
    return order


def _remove_from_cart(db: sqlite3.Connection, item: sqlite3.Row) -> None:
    db.execute("DELETE FROM cart_items WHERE user_id=? AND product_id=?", (current_user()["id"], item["id"]))
    flash(f"Removed {item['name']} from your cart.")


def register(app: Flask) -> None:
    """Add this module's routes to the site's app."""

    @app.route("/cart")
    @login_required
    def cart() -> str:
        rows = _cart_rows(get_db(), current_user()["id"])
        subtotal = sum(r["line_cents"] for r in rows)
        return render_template("cart.html", rows=rows, subtotal=subtotal, shipping=shipping_for(subtotal) if rows else 0)

    @app.route("/cart/add", methods=["POST"])
    @login_required
    def cart_add():
        db = get_db()
        item = _product_or_404(db, request.form.get("product_id"))
        qty = _quantity(request.form.get("quantity", "1"))
        if qty is None or qty == 0:
            return redirect(url_for("product", product_id=item["id"]))
        if item["stock"] == 0:
            flash(f"Sorry, {item['name']} is out of stock.")
            return redirect(url_for("product", product_id=item["id"]))
        db.execute("INSERT INTO cart_items (user_id, product_id, quantity) VALUES (?,?,?) ON CONFLICT(user_id,"
                   " product_id) DO UPDATE SET quantity = MIN(quantity + excluded.quantity, ?)",
                   (current_user()["id"], item["id"], qty, MAX_QUANTITY))
        db.commit()
        flash(f"Added {qty} × {item['name']} to your cart.")
        return redirect(url_for("cart"))

    @app.route("/cart/update", methods=["POST"])
    @login_required
    def cart_update():
        db = get_db()
        item = _product_or_404(db, request.form.get("product_id"))
        qty = _quantity(request.form.get("quantity"))
        if qty is not None:
            if qty == 0:
                _remove_from_cart(db, item)
            else:
                db.execute("UPDATE cart_items SET quantity=? WHERE user_id=? AND product_id=?",
                           (qty, current_user()["id"], item["id"]))
                flash(f"Updated {item['name']} to quantity {qty}.")
            db.commit()
        return redirect(url_for("cart"))

    @app.route("/cart/remove", methods=["POST"])
    @login_required
    def cart_remove():
        db = get_db()
        _remove_from_cart(db, _product_or_404(db, request.form.get("product_id")))
        db.commit()
        return redirect(url_for("cart"))

    @app.route("/checkout", methods=["GET", "POST"])
    @login_required
    def checkout():
        db = get_db()
        user = current_user()
        rows = _cart_rows(db, user["id"])
        if not rows:
            flash("Your cart is empty; add something before checking out.")
            return redirect(url_for("cart"))
        subtotal = sum(r["line_cents"] for r in rows)
        defaults = {"ship_name": user["display_name"], "ship_street": user["street"], "ship_city": user["city"],
                    "ship_state": user["state"], "ship_zip": user["zip"]}
        if request.method == "GET":
            return render_template("checkout.html", rows=rows, subtotal=subtotal, shipping=shipping_for(subtotal),
                                   address=defaults, fields=ADDRESS_FIELDS)
        address = {key: request.form.get(key, "").strip() for key in ADDRESS_FIELDS}
        missing = [label for key, label in ADDRESS_FIELDS.items() if not address[key]]
        short = [r["name"] for r in rows if r["quantity"] > r["stock"]]
        if missing or short:
            if missing:
                flash("Please fill in: " + ", ".join(missing) + ".")
            for name in short:
                flash(f"Not enough stock for {name}; lower the quantity in your cart.")
            return render_template("checkout.html", rows=rows, subtotal=subtotal, shipping=shipping_for(subtotal),
                                   address=address, fields=ADDRESS_FIELDS), 400
        number = str(int(db.execute("SELECT MAX(CAST(number AS INTEGER)) FROM orders").fetchone()[0]) + 1)
        shipping = shipping_for(subtotal)
        cur = db.execute(
            "INSERT INTO orders (number, user_id, created, status, subtotal_cents, shipping_cents, total_cents,"
            " ship_name, ship_street, ship_city, ship_state, ship_zip) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (number, user["id"], site_now().strftime("%Y-%m-%d %H:%M"), "Processing", subtotal, shipping,
             subtotal + shipping, *address.values()))
        for r in rows:
            db.execute("INSERT INTO order_items (order_id, product_id, name, sku, price_cents, quantity)"
                       " VALUES (?,?,?,?,?,?)", (cur.lastrowid, r["id"], r["name"], r["sku"], r["price_cents"],
                                                r["quantity"]))
            db.execute("UPDATE products SET stock = stock - ? WHERE id=?", (r["quantity"], r["id"]))
        db.execute("DELETE FROM cart_items WHERE user_id=?", (user["id"],))
        db.commit()
        flash(f"Thank you! Your order #{number} was placed.")
        return redirect(url_for("order_detail", number=number))

    @app.route("/orders")
    @login_required
    def order_list() -> str:
        db = get_db()
        uid = current_user()["id"]
        total = db.execute("SELECT COUNT(*) FROM orders WHERE user_id=?", (uid,)).fetchone()[0]
        pages = page_count(total)
        page = min(parse_page(request.args.get("page")), pages)
        rows = db.execute(
            "SELECT o.*, (SELECT SUM(quantity) FROM order_items oi WHERE oi.order_id = o.id) AS item_count"
            " FROM orders o WHERE user_id=? ORDER BY created DESC, id DESC LIMIT ? OFFSET ?",
            (uid, PAGE_SIZE, (page - 1) * PAGE_SIZE)).fetchall()
        return render_template("orders.html", orders=rows, page=page, pages=pages, total=total,
                               endpoint="order_list", endpoint_args={})

    @app.route("/orders/<number>")
    @login_required
    def order_detail(number: str) -> str:
        order = _own_order(number)
        items = get_db().execute("SELECT *, price_cents * quantity AS line_cents FROM order_items WHERE order_id=?"
                                 " ORDER BY rowid", (order["id"],)).fetchall()
        return render_template("order.html", order=order, items=items)

    @app.route("/orders/<number>/cancel", methods=["POST"])
    @login_required
    def order_cancel(number: str):
        order = _own_order(number)
        if order["status"] != "Processing":
            flash(f"Order #{number} is {order['status'].lower()} and can no longer be canceled.")
        else:
            db = get_db()
            db.execute("UPDATE orders SET status='Canceled' WHERE id=?", (order["id"],))
            items = db.execute("SELECT product_id, quantity FROM order_items WHERE order_id=?", (order["id"],)).fetchall()
            for item in items:
                db.execute("UPDATE products SET stock = stock + ? WHERE id=?", (item["quantity"], item["product_id"]))
            db.commit()
            flash(f"Order #{number} was canceled.")
        return redirect(url_for("order_detail", number=number))
