"""Classifieds site through Flask's test client: seeding, login, every state-changing form, search and pagination."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from envs.classifieds import build_db, create_app

SITE = "classifieds"  # read by the fixtures in conftest.py


def query(db_path: Path, sql: str, *params):
    with sqlite3.connect(db_path) as conn:
        return conn.execute(sql, params).fetchall()


def alex_listing(db_path: Path, title_part: str) -> int:
    rows = query(db_path, "SELECT id FROM listings WHERE seller_id = 1 AND title LIKE ?", f"%{title_part}%")
    assert len(rows) == 1
    return rows[0][0]


def test_seeding_is_deterministic_and_seed_dependent(seeded: Path, tmp_path: Path) -> None:
    again, other = tmp_path / "again.db", tmp_path / "other.db"
    build_db(again, seed=0)
    build_db(other, seed=1)
    assert again.read_bytes() == seeded.read_bytes()
    dump = lambda p: list(sqlite3.connect(p).iterdump())  # noqa: E731
    assert dump(other) != dump(seeded)


def test_seed_has_hundreds_of_listings_and_alex_owns_six(db_path: Path) -> None:
    assert query(db_path, "SELECT COUNT(*) FROM listings")[0][0] >= 250
    assert query(db_path, "SELECT COUNT(DISTINCT category_id) FROM listings")[0][0] == 8
    assert query(db_path, "SELECT COUNT(*) FROM listings WHERE seller_id = 1")[0][0] == 6
    titles = [r[0] for r in query(db_path, "SELECT title FROM listings")]
    assert len(titles) == len(set(titles)), "titles must be unique so links resolve to one listing"
    assert query(db_path, "SELECT display_name FROM users WHERE username = 'alex'")[0][0] == "Alex Rivera"


def test_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="build_db"):
        create_app(tmp_path / "nope.db")


def test_pages_needing_login_redirect_to_login_with_next(client) -> None:
    for path in ("/messages", "/my-listings", "/listings/new", "/favourites"):
        resp = client.get(path)
        assert resp.status_code == 302
        assert resp.location == f"/login?next={path}"


def test_login_rejects_wrong_password_and_follows_next(client) -> None:
    bad = client.post("/login", data={"username": "alex", "password": "wrong"})
    assert bad.status_code == 401 and b"Invalid username or password" in bad.data
    assert client.get("/messages").status_code == 302
    ok = client.post("/login", data={"username": "alex", "password": "confkv", "next": "/messages"})
    assert ok.location == "/messages"
    page = client.get("/messages").get_data(as_text=True)
    assert "Alex Rivera" in page and 'class="thread-link"' in page
    assert client.post("/login", data={"username": "alex", "password": "confkv",
                                       "next": "https://evil.example/"}).location == "/"
    client.post("/logout")
    assert client.get("/messages").status_code == 302


def test_login_page_is_labelled(client) -> None:
    html = client.get("/login").get_data(as_text=True)
    assert '<label for="username">Username</label>' in html
    assert '<label for="password">Password</label>' in html
    assert ">Sign in</button>" in html


def test_search_keyword_category_price_and_sort(client, db_path: Path) -> None:
    html = client.get("/search?q=Honda&category=vehicles&max_price=15000&sort=price_desc").get_data(as_text=True)
    expected = query(db_path, "SELECT title, price_cents FROM listings WHERE category_id = 1 AND status = 'active' "
                              "AND (title LIKE '%Honda%' OR description LIKE '%Honda%') AND price_cents <= 1500000 "
                              "ORDER BY price_cents DESC, id DESC")
    assert expected, "seed should have affordable Hondas"
    shown = re.findall(r'class="listing-title" href="/listing/\d+">([^<]+)<', html)
    assert shown == [t for t, _ in expected][:20]
    assert f"of {len(expected)} listings" in html


def test_location_and_condition_filters(client) -> None:
    html = client.get("/search?location=Elmwood&condition=Like+new").get_data(as_text=True)
    rows = re.findall(r'<td class="condition">([^<]+)</td>\s*<td class="location">([^<]+)</td>', html)
    assert rows and all(r == ("Like new", "Elmwood") for r in rows)


def test_bad_filter_values_give_clear_errors(client) -> None:
    resp = client.get("/search?min_price=cheap&sort=random")
    assert resp.status_code == 400
    html = resp.get_data(as_text=True)
    assert "Minimum price must be a number" in html and "Unknown sort order" in html
    assert client.get("/category/spaceships").status_code == 404


def test_category_pagination_covers_every_listing_once(client, db_path: Path) -> None:
    total = query(db_path, "SELECT COUNT(*) FROM listings WHERE category_id = 2")[0][0]
    seen, url = [], "/category/electronics?sort=price_asc"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += re.findall(r'data-listing-id="(\d+)"', html)
        nxt = re.search(r'<a href="([^"]+)">Next page</a>', html)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert len(seen) == total == len(set(seen))
    assert "Previous page" in html and 'aria-current="page">Page 3<' in html


def test_listing_and_seller_pages(client, db_path: Path) -> None:
    lid = alex_listing(db_path, "Honda Civic")
    html = client.get(f"/listing/{lid}").get_data(as_text=True)
    assert '<h1 class="listing-title">2014 Honda Civic LX, white</h1>' in html
    assert '<span class="price">$8,900.00</span>' in html
    assert 'href="/seller/alex">Alex Rivera</a>' in html
    assert "Sign in to contact the seller" in html
    seller = client.get("/seller/alex").get_data(as_text=True)
    assert '<dd class="listing-count">6</dd>' in seller
    assert client.get("/listing/999999").status_code == 404


def test_post_new_listing(alex, db_path: Path) -> None:
    form = {"title": "Blue ceramic vase", "category": "furniture", "price": "$1,250", "condition": "Like new",
            "location": "Elmwood", "description": "Tall blue vase.", "image_alt": "A blue vase"}
    resp = alex.post("/listings/new", data=form)
    assert resp.status_code == 302
    page = alex.get(resp.location).get_data(as_text=True)
    assert "Blue ceramic vase" in page and "$1,250.00" in page and "Your listing has been posted." in page
    assert "Blue ceramic vase" in alex.get("/").get_data(as_text=True), "newest listing shows on the home page"
    bad = alex.post("/listings/new", data={**form, "price": "a lot", "title": ""})
    assert bad.status_code == 400
    assert b"Title is required" in bad.data and b"Price must be a non-negative number" in bad.data


def test_edit_own_listing_and_not_others(alex, db_path: Path) -> None:
    lid = alex_listing(db_path, "Honda Civic")
    form = alex.get(f"/listing/{lid}/edit").get_data(as_text=True)
    assert 'value="8900.00"' in form
    data = {"title": "2014 Honda Civic LX, white", "category": "vehicles", "price": "8500", "condition": "Good",
            "location": "Elmwood", "description": "Now $8,500.", "image_alt": ""}
    assert alex.post(f"/listing/{lid}/edit", data=data).status_code == 302
    assert query(db_path, "SELECT price_cents, description FROM listings WHERE id = ?", lid)[0] == (850000, "Now $8,500.")
    other = query(db_path, "SELECT id FROM listings WHERE seller_id != 1 LIMIT 1")[0][0]
    assert alex.get(f"/listing/{other}/edit").status_code == 403
    assert alex.post(f"/listing/{other}/delete").status_code == 403


def test_delete_own_listing(alex, db_path: Path) -> None:
    lid = alex_listing(db_path, "stand mixer")
    resp = alex.post(f"/listing/{lid}/delete")
    assert resp.location == "/my-listings"
    page = alex.get("/my-listings").get_data(as_text=True)
    assert "Deleted “KitchenAid stand mixer, empire red”" in page
    assert f'data-listing-id="{lid}"' not in page and page.count('class="listing-row"') == 5
    assert alex.get(f"/listing/{lid}").status_code == 410


def test_send_message_to_seller_creates_thread(alex, db_path: Path) -> None:
    lid = query(db_path, "SELECT id FROM listings WHERE seller_id != 1 AND id NOT IN "
                         "(SELECT listing_id FROM threads WHERE buyer_id = 1) LIMIT 1")[0][0]
    before = query(db_path, "SELECT COUNT(*) FROM threads")[0][0]
    resp = alex.post(f"/listing/{lid}/contact", data={"body": "Is this still for sale?"})
    assert resp.status_code == 302 and resp.location.startswith("/messages/")
    thread = alex.get(resp.location).get_data(as_text=True)
    assert '<p class="message-body">Is this still for sale?</p>' in thread
    assert query(db_path, "SELECT COUNT(*) FROM threads")[0][0] == before + 1
    alex.post(f"/listing/{lid}/contact", data={"body": "Second note"})
    assert query(db_path, "SELECT COUNT(*) FROM threads")[0][0] == before + 1, "same listing reuses the thread"
    empty = alex.post(f"/listing/{lid}/contact", data={"body": "   "})
    assert "empty" in alex.get(empty.location).get_data(as_text=True)


def test_reply_in_thread_and_unread_marking(alex, db_path: Path) -> None:
    tid = query(db_path, "SELECT t.id FROM threads t JOIN messages m ON m.thread_id = t.id WHERE m.is_read = 0 "
                         "AND m.sender_id != 1 AND 1 IN (t.buyer_id, t.seller_id) LIMIT 1")[0][0]
    assert "unread" in alex.get("/messages").get_data(as_text=True)
    alex.get(f"/messages/{tid}")
    assert query(db_path, "SELECT COUNT(*) FROM messages WHERE thread_id = ? AND is_read = 0", tid)[0][0] == 0
    resp = alex.post(f"/messages/{tid}/reply", data={"body": "Sunday works too."})
    assert "Sunday works too." in alex.get(resp.location).get_data(as_text=True)
    foreign = query(db_path, "SELECT id FROM threads WHERE 1 NOT IN (buyer_id, seller_id) LIMIT 1")[0][0]
    assert alex.get(f"/messages/{foreign}").status_code == 404


def test_favourite_toggle(alex, db_path: Path) -> None:
    lid = query(db_path, "SELECT id FROM listings WHERE seller_id != 1 AND id NOT IN "
                         "(SELECT listing_id FROM favourites) LIMIT 1")[0][0]
    title = query(db_path, "SELECT title FROM listings WHERE id = ?", lid)[0][0]
    alex.post(f"/listing/{lid}/favourite")
    assert title in alex.get("/favourites").get_data(as_text=True)
    assert "Remove from favourites" in alex.get(f"/listing/{lid}").get_data(as_text=True)
    alex.post(f"/listing/{lid}/favourite")
    assert title not in alex.get("/favourites").get_data(as_text=True)


def test_reset_by_overwriting_db_file_is_seen_at_once(alex, db_path: Path, seeded: Path) -> None:
    lid = alex_listing(db_path, "Honda Civic")
    alex.post(f"/listing/{lid}/delete")
    assert alex.get(f"/listing/{lid}").status_code == 410
    db_path.write_bytes(seeded.read_bytes())
    assert alex.get(f"/listing/{lid}").status_code == 200
