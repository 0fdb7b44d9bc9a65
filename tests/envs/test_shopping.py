"""The shopping site through Flask's test client on a freshly seeded database (no browser, no server)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from envs.shopping.seed import build_db

SITE = "shopping"  # read by the fixtures in conftest.py


def query(db_path: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def text(response) -> str:
    return response.get_data(as_text=True)


def test_same_seed_same_content_other_seed_differs(seeded: Path, tmp_path: Path) -> None:
    again, other = tmp_path / "again.sqlite", tmp_path / "other.sqlite"
    build_db(again, seed=0)
    build_db(other, seed=1)
    dump = lambda p: "\n".join(sqlite3.connect(p).iterdump())  # noqa: E731
    assert dump(again) == dump(seeded)
    assert dump(other) != dump(seeded)
    counts = query(seeded, "SELECT (SELECT COUNT(*) FROM products), (SELECT COUNT(*) FROM reviews),"
                           " (SELECT COUNT(*) FROM orders WHERE user_id=1)")[0]
    assert counts[0] >= 200 and counts[1] >= 300 and counts[2] == 15


def test_pages_that_need_login_redirect_with_next(client) -> None:
    for path in ("/cart", "/orders", "/account", "/wishlist", "/checkout"):
        response = client.get(path)
        assert response.status_code == 302
        assert response.headers["Location"] == f"/login?next={path}"


def test_login_rejects_bad_password_and_follows_next(client) -> None:
    bad = client.post("/login", data={"username": "alex", "password": "nope"})
    assert bad.status_code == 401 and "Wrong username or password" in text(bad)
    good = client.post("/login", data={"username": "alex", "password": "confkv", "next": "/orders"})
    assert good.headers["Location"] == "/orders"
    assert "Order #" in text(client.get("/orders"))
    evil = client.post("/login", data={"username": "alex", "password": "confkv", "next": "https://evil.example/"})
    assert evil.headers["Location"] == "/"
    client.post("/logout")
    assert client.get("/cart").status_code == 302


def test_search_filters_sorts_and_paginates(client, db_path: Path) -> None:
    page1 = text(client.get("/search?q=mug&sort=price_asc"))
    expected = query(db_path, "SELECT COUNT(*) FROM products WHERE name LIKE '%mug%' OR sku LIKE '%mug%'"
                              " OR brand LIKE '%mug%' OR description LIKE '%mug%'")[0][0]
    assert f"{expected} products found" in page1
    prices = [float(p.replace(",", "")) for p in re.findall(r'class="price">\$([\d,.]+)<', page1)]
    assert prices == sorted(prices) and prices
    everything = text(client.get("/search?q="))
    assert "Next page" in everything and 'aria-label="Page 2"' in everything and "Previous page" not in everything
    page2 = text(client.get("/search?q=&page=2"))
    assert "Previous page" in page2
    names1 = set(re.findall(r'class="product-link"[^>]*>([^<]+)<', everything))
    names2 = set(re.findall(r'class="product-link"[^>]*>([^<]+)<', page2))
    assert len(names1) == 20 and names1.isdisjoint(names2)
    cheap = text(client.get("/category/kitchen?max_price=20&in_stock=1"))
    n_cheap = query(db_path, "SELECT COUNT(*) FROM products WHERE category_id=1 AND price_cents<=2000 AND stock>0")[0][0]
    assert f"{n_cheap} product" in cheap
    assert "must be a number" in text(client.get("/search?q=&min_price=cheap"))


def test_product_page_shows_specs_and_reviews(client, db_path: Path) -> None:
    pid, name, sku = query(db_path, "SELECT id, name, sku FROM products ORDER BY id LIMIT 1 OFFSET 42")[0]
    page = text(client.get(f"/product/{pid}"))
    assert name.replace("'", "&#39;") in page and sku in page
    for spec_name, value in query(db_path, "SELECT name, value FROM specs WHERE product_id=?", pid):
        assert f'<th scope="row">{spec_name}</th><td>{value}</td>' in page.replace("&#39;", "'").replace("&amp;", "&")
    n_reviews = query(db_path, "SELECT COUNT(*) FROM reviews WHERE product_id=?", pid)[0][0]
    assert f"Reviews ({n_reviews})" in page
    assert client.get("/product/99999").status_code == 404


def test_review_form_posts_and_validates(alex, db_path: Path) -> None:
    before = query(db_path, "SELECT COUNT(*) FROM reviews WHERE product_id=5")[0][0]
    bad = alex.post("/product/5/reviews", data={"rating": "9", "title": "", "body": "x"}, follow_redirects=True)
    assert "Choose a rating" in text(bad) and "Give your review a title" in text(bad)
    alex.post("/product/5/reviews", data={"rating": "4", "title": "Sturdy", "body": "Held up well on a trip."})
    assert query(db_path, "SELECT COUNT(*) FROM reviews WHERE product_id=5")[0][0] == before + 1
    assert "Held up well on a trip." in text(alex.get("/product/5"))


def test_cart_add_update_remove(alex, db_path: Path) -> None:
    pid = query(db_path, "SELECT id FROM products WHERE stock > 5 AND id NOT IN (SELECT product_id FROM cart_items)"
                         " ORDER BY id LIMIT 1")[0][0]
    alex.post("/cart/add", data={"product_id": pid, "quantity": "2"})
    alex.post("/cart/add", data={"product_id": pid, "quantity": "1"})
    assert query(db_path, "SELECT quantity FROM cart_items WHERE user_id=1 AND product_id=?", pid) == [(3,)]
    alex.post("/cart/update", data={"product_id": pid, "quantity": "5"})
    assert query(db_path, "SELECT quantity FROM cart_items WHERE user_id=1 AND product_id=?", pid) == [(5,)]
    bad = alex.post("/cart/update", data={"product_id": pid, "quantity": "lots"}, follow_redirects=True)
    assert "whole number" in text(bad)
    alex.post("/cart/remove", data={"product_id": pid})
    assert query(db_path, "SELECT quantity FROM cart_items WHERE user_id=1 AND product_id=?", pid) == []
    assert alex.post("/cart/add", data={"product_id": "nope"}).status_code == 400


def test_checkout_places_order_and_empties_cart(alex, db_path: Path) -> None:
    cart = query(db_path, "SELECT p.id, ci.quantity, p.stock, p.price_cents FROM cart_items ci"
                          " JOIN products p ON p.id=ci.product_id WHERE ci.user_id=1")
    assert cart, "seed puts items in alex's cart"
    max_number = int(query(db_path, "SELECT MAX(CAST(number AS INTEGER)) FROM orders")[0][0])
    missing = alex.post("/checkout", data={"ship_name": "", "ship_street": "1 A St", "ship_city": "X",
                                           "ship_state": "OR", "ship_zip": "97000"})
    assert missing.status_code == 400 and "Full name" in text(missing)
    response = alex.post("/checkout", data={"ship_name": "Alex Rivera", "ship_street": "9 Elm Drive",
                                            "ship_city": "Boise", "ship_state": "ID", "ship_zip": "83702"})
    assert response.headers["Location"] == f"/orders/{max_number + 1}"
    page = text(alex.get(response.headers["Location"]))
    assert f'<span id="order-number">{max_number + 1}</span>' in page and "9 Elm Drive" in page
    assert query(db_path, "SELECT COUNT(*) FROM cart_items WHERE user_id=1")[0][0] == 0
    for pid, qty, stock, _price in cart:
        assert query(db_path, "SELECT stock FROM products WHERE id=?", pid)[0][0] == stock - qty
    subtotal = sum(q * p for _i, q, _s, p in cart)
    total = query(db_path, "SELECT total_cents FROM orders WHERE number=?", str(max_number + 1))[0][0]
    assert total == subtotal + (0 if subtotal >= 5000 else 599)
    alex.post(f"/orders/{max_number + 1}/cancel")
    assert query(db_path, "SELECT status FROM orders WHERE number=?", str(max_number + 1)) == [("Canceled",)]


def test_order_history_is_private_and_complete(alex, db_path: Path) -> None:
    numbers = [n for (n,) in query(db_path, "SELECT number FROM orders WHERE user_id=1 ORDER BY created DESC")]
    page = text(alex.get("/orders"))
    assert re.findall(r"Order #(\d+)</a>", page) == numbers
    other = query(db_path, "SELECT number FROM orders WHERE user_id<>1 LIMIT 1")[0][0]
    assert alex.get(f"/orders/{other}").status_code == 404
    delivered = query(db_path, "SELECT number FROM orders WHERE user_id=1 AND status='Delivered' LIMIT 1")[0][0]
    assert "can no longer be canceled" in text(alex.post(f"/orders/{delivered}/cancel", follow_redirects=True))


def test_account_edit_and_wishlist(alex, db_path: Path) -> None:
    form = {"display_name": "Alex Rivera", "email": "alex@newmail.example", "phone": "503-555-0199",
            "street": "77 Harbor Road", "city": "Portland", "state": "OR", "zip": "97209"}
    alex.post("/account", data=form)
    assert query(db_path, "SELECT email, street FROM users WHERE username='alex'") == [
        ("alex@newmail.example", "77 Harbor Road")]
    bad = alex.post("/account", data={**form, "email": "not-an-email"})
    assert bad.status_code == 400 and "valid Email" in text(bad)
    alex.post("/wishlist/add", data={"product_id": "3"})
    assert (1, 3) in query(db_path, "SELECT user_id, product_id FROM wishlist")
    alex.post("/wishlist/remove", data={"product_id": "3", "back": "wishlist"})
    assert (1, 3) not in query(db_path, "SELECT user_id, product_id FROM wishlist")


def test_every_input_is_labelled(alex, db_path: Path) -> None:
    """Accessibility guard: each visible input/textarea has a <label for> or an aria-label."""
    pages = ["/", "/search?q=lamp", "/product/7", "/cart", "/checkout", "/account", "/wishlist", "/orders"]
    for path in pages:
        html = text(alex.get(path))
        labels = set(re.findall(r'<label for="([^"]+)"', html))
        for tag in re.findall(r"<(?:input|textarea)\b[^>]*>", html):
            if 'type="hidden"' in tag:
                continue
            input_id = re.search(r'id="([^"]+)"', tag)
            assert "aria-label=" in tag or (input_id and input_id.group(1) in labels), f"{path}: {tag}"
