"""Deterministic seeded database for the shopping site.

Everything comes from one `random.Random(seed)` and the word lists in `words.py`, inserted in a fixed order, so the
same seed yields the same rows (task answers are read from them). Prices are stored as integer cents so that totals
are exact and render the same on every page.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import sqlite3
from pathlib import Path

from envs.shopping import words
from envs.webapp import fresh_db_file, pbkdf2_hex

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password_hash TEXT NOT NULL,
    display_name TEXT NOT NULL, email TEXT NOT NULL, phone TEXT NOT NULL,
    street TEXT NOT NULL, city TEXT NOT NULL, state TEXT NOT NULL, zip TEXT NOT NULL
);
CREATE TABLE categories (id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, name TEXT NOT NULL, blurb TEXT NOT NULL);
CREATE TABLE products (
    id INTEGER PRIMARY KEY, sku TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
    category_id INTEGER NOT NULL REFERENCES categories(id), brand TEXT NOT NULL,
    price_cents INTEGER NOT NULL, stock INTEGER NOT NULL, description TEXT NOT NULL
);
CREATE TABLE specs (
    product_id INTEGER NOT NULL REFERENCES products(id), position INTEGER NOT NULL,
    name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (product_id, position)
);
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id),
    user_id INTEGER NOT NULL REFERENCES users(id), rating INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
    title TEXT NOT NULL, body TEXT NOT NULL, created TEXT NOT NULL
);
CREATE TABLE cart_items (
    user_id INTEGER NOT NULL REFERENCES users(id), product_id INTEGER NOT NULL REFERENCES products(id),
    quantity INTEGER NOT NULL CHECK (quantity > 0), PRIMARY KEY (user_id, product_id)
);
CREATE TABLE wishlist (
    user_id INTEGER NOT NULL REFERENCES users(id), product_id INTEGER NOT NULL REFERENCES products(id),
    PRIMARY KEY (user_id, product_id)
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY, number TEXT UNIQUE NOT NULL, user_id INTEGER NOT NULL REFERENCES users(id),
    created TEXT NOT NULL, status TEXT NOT NULL, subtotal_cents INTEGER NOT NULL, shipping_cents INTEGER NOT NULL,
    total_cents INTEGER NOT NULL, ship_name TEXT NOT NULL, ship_street TEXT NOT NULL, ship_city TEXT NOT NULL,
    ship_state TEXT NOT NULL, ship_zip TEXT NOT NULL
);
CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(id), product_id INTEGER NOT NULL REFERENCES products(id),
    name TEXT NOT NULL, sku TEXT NOT NULL, price_cents INTEGER NOT NULL, quantity INTEGER NOT NULL
);
CREATE INDEX idx_products_category ON products(category_id);
CREATE INDEX idx_reviews_product ON reviews(product_id);
CREATE INDEX idx_orders_user ON orders(user_id);
"""

PRODUCTS_PER_CATEGORY = 30
N_OTHER_USERS = 40
N_ALEX_ORDERS = 15
N_OTHER_ORDERS = 45
FREE_SHIPPING_CENTS = 5000
SHIPPING_CENTS = 599


def hash_password(username: str, password: str) -> str:
    """Salted PBKDF2; the salt is derived from the username so the seeded DB stays byte-identical per seed."""
    salt = hashlib.sha256(f"onestopshop:{username}".encode()).hexdigest()[:16]
    return f"pbkdf2:{salt}:{pbkdf2_hex(password, salt, 20_000)}"


def shipping_for(subtotal_cents: int) -> int:
    """Orders of $50 or more ship free; shared by the seed and the checkout so both agree."""
    return 0 if subtotal_cents >= FREE_SHIPPING_CENTS else SHIPPING_CENTS


def build_db(db_path: Path, seed: int = 0) -> None:
    """Create the schema and fill it deterministically from `seed`; an existing file is replaced."""
    db_path = fresh_db_file(db_path)
    rng = random.Random(seed)
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        users = _insert_users(conn, rng)
        products = _insert_catalog(conn, rng)
        _insert_reviews(conn, rng, products, users)
        _insert_orders(conn, rng, products, users)
        _insert_cart_and_wishlist(conn, rng, products)
        conn.commit()
    finally:
        conn.close()


def _insert_users(conn: sqlite3.Connection, rng: random.Random) -> list[int]:
    rows = [("alex", "confkv", "Alex Rivera", "alex.rivera@example.com", "503-555-0142",
             "1420 Maple Avenue", "Portland", "OR", "97205")]
    taken = {"alex"}
    while len(rows) < N_OTHER_USERS + 1:
        first, last = rng.choice(words.FIRST_NAMES), rng.choice(words.LAST_NAMES)
        username = f"{first.lower()}{last[0].lower()}{rng.randint(1, 99)}".replace("á", "a")
        if username in taken:
            continue
        taken.add(username)
        city, state, zip3 = rng.choice(words.CITIES)
        rows.append((username, f"pass-{username}", f"{first} {last}", f"{username}@example.com",
                     f"555-01{rng.randint(10, 99)}", f"{rng.randint(10, 9999)} {rng.choice(words.STREETS)}",
                     city, state, f"{zip3}{rng.randint(10, 99)}"))
    conn.executemany(
        "INSERT INTO users (username, password_hash, display_name, email, phone, street, city, state, zip)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        [(u, hash_password(u, p), *rest) for u, p, *rest in rows],
    )
    return [r[0] for r in conn.execute("SELECT id FROM users ORDER BY id")]


def _price_cents(rng: random.Random, low: int, high: int) -> int:
    dollars = int(low * (high / low) ** rng.random())  # log-uniform: many cheap items, a few expensive ones
    return dollars * 100 + rng.choice([99, 49, 95, 0, 29])


def _insert_catalog(conn: sqlite3.Connection, rng: random.Random) -> list[tuple[int, str, str, int]]:
    """Returns (id, name, noun, price_cents) per product, for reviews and orders."""
    products: list[tuple[int, str, str, int]] = []
    names: set[str] = set()
    for cat_index, cat in enumerate(words.CATEGORIES, start=1):
        conn.execute("INSERT INTO categories (id, slug, name, blurb) VALUES (?,?,?,?)",
                     (cat_index, cat["slug"], cat["name"], cat["blurb"]))
        made = 0
        while made < PRODUCTS_PER_CATEGORY:
            brand, modifier, noun = rng.choice(words.BRANDS), rng.choice(cat["modifiers"]), rng.choice(cat["nouns"])
            name = f"{brand} {modifier} {noun}"
            if name in names:
                continue
            names.add(name)
            made += 1
            color, price = rng.choice(words.COLORS), _price_cents(rng, *cat["price"])
            fill = {"name": name, "brand": brand, "color": color.lower(), "category": cat["name"]}
            description = " ".join(rng.choice(part).format(**fill) for part in (
                words.DESCRIPTION_OPENERS, words.DESCRIPTION_MIDDLES, words.DESCRIPTION_CLOSERS))
            stock = rng.choice([0, 0, 3, 7, 12, 25, 40, 60, 85, 120])
            sku = f"{cat['slug'][:3].upper()}-{cat_index:02d}{made:02d}{rng.randint(0, 9)}"
            cur = conn.execute(
                "INSERT INTO products (sku, name, category_id, brand, price_cents, stock, description)"
                " VALUES (?,?,?,?,?,?,?)", (sku, name, cat_index, brand, price, stock, description))
            pid = int(cur.lastrowid)
            specs = [("Brand", brand), ("Color", color)]
            specs += [(key, rng.choice(values)) for key, values in cat["specs"].items()]
            specs.append(("Weight", f"{rng.randint(2, 160) / 10:.1f} lb"))
            conn.executemany("INSERT INTO specs (product_id, position, name, value) VALUES (?,?,?,?)",
                             [(pid, i, k, v) for i, (k, v) in enumerate(specs)])
            products.append((pid, name, noun, price))
    return products


def _insert_reviews(conn: sqlite3.Connection, rng: random.Random, products: list[tuple[int, str, str, int]],
                    users: list[int]) -> None:
    reviewers = users[1:]  # alex writes no seeded reviews, so "my reviews" start empty
    start = dt.date(2022, 6, 1)
    for pid, _name, noun, _price in products:
        bias = rng.choice([5, 5, 4, 4, 4, 3, 2])
        for reviewer in rng.sample(reviewers, rng.choice([0, 1, 2, 3, 3, 4, 5, 6])):
            rating = max(1, min(5, bias + rng.choice([-2, -1, 0, 0, 0, 1])))
            created = start + dt.timedelta(days=rng.randint(0, 720))
            conn.execute(
                "INSERT INTO reviews (product_id, user_id, rating, title, body, created) VALUES (?,?,?,?,?,?)",
                (pid, reviewer, rating, rng.choice(words.REVIEW_TITLES[rating]),
                 rng.choice(words.REVIEW_BODIES[rating]).format(noun=noun.lower()), created.isoformat()))


def _insert_orders(conn: sqlite3.Connection, rng: random.Random, products: list[tuple[int, str, str, int]],
                   users: list[int]) -> None:
    """Alex's 15 orders are interleaved with other users' orders so order numbers are not consecutive."""
    owners = [users[0]] * N_ALEX_ORDERS + [rng.choice(users[1:]) for _ in range(N_OTHER_ORDERS)]
    start = dt.datetime(2023, 1, 9, 9, 0)
    dates = sorted(start + dt.timedelta(minutes=rng.randint(0, 560 * 24 * 60)) for _ in owners)
    rng.shuffle(owners)
    number = 100100
    for owner, created in zip(owners, dates, strict=True):
        number += rng.randint(3, 17)
        user = conn.execute("SELECT display_name, street, city, state, zip FROM users WHERE id=?", (owner,)).fetchone()
        items = [(products[i], rng.choice([1, 1, 1, 2, 3])) for i in rng.sample(range(len(products)),
                                                                                 rng.choice([1, 1, 2, 2, 3, 4]))]
        subtotal = sum(p[3] * q for p, q in items)
        shipping = shipping_for(subtotal)
        age_days = (dates[-1] - created).days
        status = "Processing" if age_days < 3 else "Shipped" if age_days < 12 else rng.choice(
            ["Delivered"] * 6 + ["Canceled"])
        cur = conn.execute(
            "INSERT INTO orders (number, user_id, created, status, subtotal_cents, shipping_cents, total_cents,"
            " ship_name, ship_street, ship_city, ship_state, ship_zip) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (str(number), owner, created.strftime("%Y-%m-%d %H:%M"), status, subtotal, shipping,
             subtotal + shipping, *user))
        order_id = int(cur.lastrowid)
        for (pid, name, _noun, price), qty in items:
            sku = conn.execute("SELECT sku FROM products WHERE id=?", (pid,)).fetchone()[0]
            conn.execute("INSERT INTO order_items (order_id, product_id, name, sku, price_cents, quantity)"
                         " VALUES (?,?,?,?,?,?)", (order_id, pid, name, sku, price, qty))
    # Alex's two latest orders are still on their way, so status questions have non-trivial answers.
    latest = [r[0] for r in conn.execute("SELECT id FROM orders WHERE user_id=? ORDER BY created DESC LIMIT 2",
                                         (users[0],))]
    conn.execute("UPDATE orders SET status='Processing' WHERE id=?", (latest[0],))
    conn.execute("UPDATE orders SET status='Shipped' WHERE id=?", (latest[1],))


def _insert_cart_and_wishlist(conn: sqlite3.Connection, rng: random.Random,
                              products: list[tuple[int, str, str, int]]) -> None:
    in_stock = [p[0] for p in products
                if conn.execute("SELECT stock FROM products WHERE id=?", (p[0],)).fetchone()[0] > 0]
    picks = rng.sample(in_stock, 5)
    conn.executemany("INSERT INTO cart_items (user_id, product_id, quantity) VALUES (1,?,?)",
                     [(picks[0], 1), (picks[1], 2)])
    conn.executemany("INSERT INTO wishlist (user_id, product_id) VALUES (1,?)", [(p,) for p in picks[2:]])
