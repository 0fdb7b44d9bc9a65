"""Catalog pages: home, search, category listings (filter, sort, paginate) and product pages with reviews."""

from __future__ import annotations

from typing import Any

from flask import Flask, abort, flash, redirect, render_template, request, url_for

from envs.shopping.db import PAGE_SIZE, current_user, get_db, login_required, page_count, parse_page
from envs.webapp import LIKE, like_contains, site_now

# Sort key -> (link text, ORDER BY clause). Links, not a <select>, so an agent can pick one with a single click.
SORTS: dict[str, tuple[str, str]] = {
    "featured": ("Featured", "p.id"),
    "price_asc": ("Price: low to high", "p.price_cents, p.id"),
    "price_desc": ("Price: high to low", "p.price_cents DESC, p.id"),
    "rating": ("Top rated", "rating IS NULL, rating DESC, review_count DESC, p.id"),
    "name": ("Name: A to Z", "p.name, p.id"),
}

# Review lengths, as the forum caps its posts: a title is a line, a review a few paragraphs.
MAX_REVIEW_TITLE, MAX_REVIEW_BODY = 200, 10_000

PRODUCT_COLUMNS = """p.*, c.slug AS category_slug, c.name AS category_name,
    (SELECT ROUND(AVG(r.rating), 1) FROM reviews r WHERE r.product_id = p.id) AS rating,
    (SELECT COUNT(*) FROM reviews r WHERE r.product_id = p.id) AS review_count"""


def _dollars_to_cents(raw: str | None, label: str) -> int | None:
    """Price filter values; a bad value is reported to the user instead of silently ignored."""
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw.strip().lstrip("$").replace(",", ""))
    except ValueError:
        flash(f"{label} must be a number, like 25 or 19.99; it was ignored.")
        return None
    return int(round(value * 100))


def _listing(where: list[str], params: list[Any], default_sort: str) -> dict[str, Any]:
    """Shared query for search and category pages: price/stock filters, sorting and pagination."""
    args = request.args
    min_cents = _dollars_to_cents(args.get("min_price"), "Minimum price")
    max_cents = _dollars_to_cents(args.get("max_price"), "Maximum price")
    if min_cents is not None:
        where.append("p.price_cents >= ?")
        params.append(min_cents)
    if max_cents is not None:
        where.append("p.price_cents <= ?")
        params.append(max_cents)
    in_stock = args.get("in_stock") == "1"
    if in_stock:
        where.append("p.stock > 0")
    sort = args.get("sort") if args.get("sort") in SORTS else default_sort
    clause = " AND ".join(where) or "1"
    # Active filters, carried along by the sort and pagination links.
    keep = {k: args[k] for k in ("min_price", "max_price") if args.get(k, "").strip()}
    if in_stock:
        keep["in_stock"] = "1"
    db = get_db()
    total = db.execute(f"SELECT COUNT(*) FROM products p WHERE {clause}", params).fetchone()[0]
    pages = page_count(total)
    page = min(parse_page(args.get("page")), pages)
    rows = db.execute(
        f"SELECT {PRODUCT_COLUMNS} FROM products p JOIN categories c ON c.id = p.category_id WHERE {clause}"
        f" ORDER BY {SORTS[sort][1]} LIMIT ? OFFSET ?", [*params, PAGE_SIZE, (page - 1) * PAGE_SIZE]).fetchall()
    return {"products": rows, "total": total, "page": page, "pages": pages, "sort": sort, "sorts": SORTS,
            "filters": {"min_price": args.get("min_price", ""), "max_price": args.get("max_price", ""),
                        "in_stock": in_stock, "keep": keep}}


def register(app: Flask) -> None:
    """Add this module's routes to the site's app."""

    @app.route("/")
    def home() -> str:
        db = get_db()
        top = db.execute(
            f"SELECT {PRODUCT_COLUMNS} FROM products p JOIN categories c ON c.id = p.category_id"
            " WHERE (SELECT COUNT(*) FROM reviews r WHERE r.product_id = p.id) >= 3"
            " ORDER BY rating DESC, review_count DESC, p.id LIMIT 6").fetchall()
        return render_template("home.html", top=top)

    @app.route("/search")
    def search() -> str:
        query = request.args.get("q", "").strip()
        where: list[str] = []
        params: list[Any] = []
        for term in query.split():
            where.append(f"(p.name {LIKE} OR p.sku {LIKE} OR p.brand {LIKE} OR p.description {LIKE})")
            params += [like_contains(term)] * 4
        listing = _listing(where, params, default_sort="featured")
        return render_template("listing.html", heading=f"Search results for “{query}”" if query else "All products",
                               query=query, endpoint="search", endpoint_args={"q": query}, **listing)

    @app.route("/category/<slug>")
    def category(slug: str) -> str:
        cat = get_db().execute("SELECT * FROM categories WHERE slug=?", (slug,)).fetchone()
        if cat is None:
            abort(404, description=f"There is no category called '{slug}'.")
        listing = _listing(["p.category_id = ?"], [cat["id"]], default_sort="featured")
        return render_template("listing.html", heading=cat["name"], blurb=cat["blurb"], query=None,
                               endpoint="category", endpoint_args={"slug": slug}, **listing)

    @app.route("/product/<int:product_id>")
    def product(product_id: int) -> str:
        db = get_db()
        item = db.execute(f"SELECT {PRODUCT_COLUMNS} FROM products p JOIN categories c ON c.id = p.category_id"
                          " WHERE p.id=?", (product_id,)).fetchone()
        if item is None:
            abort(404, description=f"Product {product_id} does not exist.")
        specs = db.execute("SELECT name, value FROM specs WHERE product_id=? ORDER BY position", (product_id,)).fetchall()
        reviews = db.execute(
            "SELECT r.*, u.display_name FROM reviews r JOIN users u ON u.id = r.user_id WHERE r.product_id=?"
            " ORDER BY r.created DESC, r.id DESC", (product_id,)).fetchall()
        user = current_user()
        wished = user is not None and db.execute("SELECT 1 FROM wishlist WHERE user_id=? AND product_id=?",
                                                 (user["id"], product_id)).fetchone() is not None
        return render_template("product.html", item=item, specs=specs, reviews=reviews, wished=wished)

    @app.route("/product/<int:product_id>/reviews", methods=["POST"])
    @login_required
    def add_review(product_id: int):
        db = get_db()
        if db.execute("SELECT 1 FROM products WHERE id=?", (product_id,)).fetchone() is None:
            abort(404, description=f"Product {product_id} does not exist.")
        form = request.form
        rating, title, body = form.get("rating", ""), form.get("title", "").strip(), form.get("body", "").strip()
        errors = []
        if rating not in {"1", "2", "3", "4", "5"}:
            errors.append("Choose a rating from 1 to 5 stars.")
        if not title:
            errors.append("Give your review a title.")
        elif len(title) > MAX_REVIEW_TITLE:
            errors.append(f"The title is {len(title):,} characters long; keep it to at most {MAX_REVIEW_TITLE}.")
        if not body:
            errors.append("Write a few words in the review text.")
        elif len(body) > MAX_REVIEW_BODY:
            errors.append(f"The review is {len(body):,} characters long; keep it to at most {MAX_REVIEW_BODY:,}.")
        if errors:
            for message in errors:
                flash(message)
            return redirect(url_for("product", product_id=product_id, _anchor="write-review"))
        db.execute("INSERT INTO reviews (product_id, user_id, rating, title, body, created) VALUES (?,?,?,?,?,?)",
                   (product_id, current_user()["id"], int(rating), title, body, site_now().date().isoformat()))
        db.commit()
        flash("Thank you! Your review was posted.")
        return redirect(url_for("product", product_id=product_id, _anchor="reviews"))
