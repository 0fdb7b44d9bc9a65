"""Public pages of the classifieds site: home, search with filters, categories, listing and seller pages."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, abort, render_template, request, url_for

from envs import webapp
from envs.classifieds.web import PAGE_SIZE, current_user, db

SORTS = {
    "newest": ("Newest first", "l.posted_at DESC, l.id DESC"),
    "oldest": ("Oldest first", "l.posted_at ASC, l.id ASC"),
    "price_asc": ("Price: low to high", "l.price_cents ASC, l.id ASC"),
    "price_desc": ("Price: high to low", "l.price_cents DESC, l.id DESC"),
}
CONDITIONS = ["New", "Like new", "Good", "Fair", "For parts"]
LISTING_COLUMNS = ("l.id, l.title, l.price_cents, l.condition, l.location, l.posted_at, c.slug AS category_slug, "
                   "c.name AS category_name")


@dataclass
class SearchFilters:
    """Search parameters parsed from the query string; `errors` holds messages for values that made no sense."""

    q: str = ""
    category: str = ""
    min_price: float | None = None
    max_price: float | None = None
    location: str = ""
    condition: str = ""
    sort: str = "newest"
    page: int = 1
    errors: list[str] = field(default_factory=list)

    def as_args(self, **override: Any) -> dict[str, Any]:
        """Query-string arguments that reproduce these filters (empty ones dropped), for pagination links."""
        args = {"q": self.q, "category": self.category, "min_price": _fmt(self.min_price),
                "max_price": _fmt(self.max_price), "location": self.location, "condition": self.condition,
                "sort": "" if self.sort == "newest" else self.sort, "page": self.page}
        args.update(override)
        return {k: v for k, v in args.items() if v not in ("", None) and not (k == "page" and v == 1)}


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value == int(value) else str(value)


def _parse_price(raw: str, label: str, errors: list[str]) -> float | None:
    raw = raw.strip().replace("$", "").replace(",", "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        errors.append(f"{label} must be a number, got {raw!r}.")
        return None
    if value < 0:
        errors.append(f"{label} cannot be negative.")
        return None
    return value


def parse_filters(args: Any, category: str = "") -> SearchFilters:
    f = SearchFilters(q=args.get("q", "").strip(), category=category or args.get("category", "").strip(),
                      location=args.get("location", "").strip(), condition=args.get("condition", "").strip())
    f.min_price = _parse_price(args.get("min_price", ""), "Minimum price", f.errors)
    f.max_price = _parse_price(args.get("max_price", ""), "Maximum price", f.errors)
    sort = args.get("sort", "newest") or "newest"
    if sort not in SORTS:
        f.errors.append(f"Unknown sort order {sort!r}; use one of {', '.join(SORTS)}.")
        sort = "newest"
    f.sort = sort
    page = args.get("page", "1") or "1"
    if not page.isdigit() or int(page) < 1:
        f.errors.append(f"Page must be a positive whole number, got {page!r}.")
        page = "1"
    f.page = int(page)
    if f.condition and f.condition not in CONDITIONS:
        f.errors.append(f"Unknown condition {f.condition!r}.")
        f.condition = ""
    return f


def run_search(f: SearchFilters) -> tuple[list[Any], int]:
    """Return (rows on the requested page, total matching rows)."""
    where, params = ["l.status = 'active'"], []
    if f.q:
        for word in f.q.split():
            where.append(f"(l.title {webapp.LIKE} OR l.description {webapp.LIKE})")
            params += [webapp.like_contains(word)] * 2
    if f.category:
        where.append("c.slug = ?")
        params.append(f.category)
    if f.min_price is not None:
        where.append("l.price_cents >= ?")
        params.append(round(f.min_price * 100))
    if f.max_price is not None:
        where.append("l.price_cents <= ?")
        params.append(round(f.max_price * 100))
    if f.location:
        where.append("l.location = ?")
        params.append(f.location)
    if f.condition:
        where.append("l.condition = ?")
        params.append(f.condition)
    base = f"FROM listings l JOIN categories c ON c.id = l.category_id WHERE {' AND '.join(where)}"
    total = db().execute(f"SELECT COUNT(*) {base}", params).fetchone()[0]
    rows = db().execute(f"SELECT {LISTING_COLUMNS} {base} ORDER BY {SORTS[f.sort][1]} LIMIT ? OFFSET ?",
                        [*params, PAGE_SIZE, (f.page - 1) * PAGE_SIZE]).fetchall()
    return rows, total


def _results_page(f: SearchFilters, heading: str, slug: str | None = None) -> Any:
    """Render the results table; on a category page (`slug` set) the category lives in the path, not the query."""
    categories = db().execute("SELECT slug, name FROM categories ORDER BY id").fetchall()
    if f.category and f.category not in {c["slug"] for c in categories}:
        abort(404, description=f"No category called {f.category!r}.")
    locations = [r[0] for r in db().execute("SELECT DISTINCT location FROM listings ORDER BY location")]
    rows, total = run_search(f) if not f.errors else ([], 0)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    status = 400 if f.errors else 200

    def page_url(n: int) -> str:
        if slug:
            return url_for("category", slug=slug, **f.as_args(page=n, category=""))
        return url_for("search", **f.as_args(page=n))

    return render_template("results.html", f=f, heading=heading, rows=rows, total=total, pages=pages,
                           categories=categories, locations=locations, sorts=SORTS, conditions=CONDITIONS,
                           page_url=page_url), status


def register(app: Flask) -> None:
    @app.route("/")
    def home() -> Any:
        categories = db().execute(
            "SELECT c.slug, c.name, COUNT(l.id) AS n FROM categories c "
            "LEFT JOIN listings l ON l.category_id = c.id AND l.status = 'active' GROUP BY c.id ORDER BY c.id"
        ).fetchall()
        latest = db().execute(
            f"SELECT {LISTING_COLUMNS} FROM listings l JOIN categories c ON c.id = l.category_id "
            "WHERE l.status = 'active' ORDER BY l.posted_at DESC, l.id DESC LIMIT 10").fetchall()
        return render_template("home.html", categories=categories, latest=latest)

    @app.route("/search")
    def search() -> Any:
        f = parse_filters(request.args)
        heading = f"Results for “{f.q}”" if f.q else "All listings"
        return _results_page(f, heading)

    @app.route("/category/<slug>")
    def category(slug: str) -> Any:
        row = db().execute("SELECT name FROM categories WHERE slug = ?", (slug,)).fetchone()
        if row is None:
            abort(404, description=f"No category called {slug!r}.")
        f = parse_filters(request.args, category=slug)
        return _results_page(f, row["name"], slug)

    @app.route("/listing/<int:listing_id>")
    def listing(listing_id: int) -> Any:
        row = db().execute(
            "SELECT l.*, c.slug AS category_slug, c.name AS category_name, u.username, u.display_name "
            "FROM listings l JOIN categories c ON c.id = l.category_id JOIN users u ON u.id = l.seller_id "
            "WHERE l.id = ?", (listing_id,)).fetchone()
        if row is None:
            abort(404, description="No such listing.")
        if row["status"] != "active":
            return render_template("removed.html", listing=row), 410
        user = current_user()
        favourite = user is not None and db().execute(
            "SELECT 1 FROM favourites WHERE user_id = ? AND listing_id = ?", (user["id"], listing_id)).fetchone()
        return render_template("listing.html", listing=row, favourite=bool(favourite))

    @app.route("/seller/<username>")
    def seller(username: str) -> Any:
        person = db().execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()
        if person is None:
            abort(404, description=f"No seller called {username!r}.")
        rows = db().execute(
            f"SELECT {LISTING_COLUMNS} FROM listings l JOIN categories c ON c.id = l.category_id "
            "WHERE l.seller_id = ? AND l.status = 'active' ORDER BY l.posted_at DESC, l.id DESC",
            (person["id"],)).fetchall()
        return render_template("seller.html", person=person, rows=rows)

    @app.errorhandler(403)
    @app.errorhandler(404)
    def _error(exc: Any) -> Any:
        return render_template("error.html", code=exc.code, message=exc.description), exc.code
