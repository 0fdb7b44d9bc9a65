"""Forum site through Flask's test client on a freshly seeded database (no browser)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from envs.forum import build_db, create_app
from envs.forum.db import PAGE_SIZE

SITE = "forum"  # read by the fixtures in conftest.py


def query(db_path: Path, sql: str, *params):
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def alex_thread(db_path: Path) -> tuple[int, str]:
    return query(db_path, "SELECT t.id, f.name FROM threads t JOIN forums f ON f.id = t.forum_id "
                          "WHERE t.author_id = 1 ORDER BY t.id LIMIT 1")[0]


def other_thread(db_path: Path) -> tuple[int, str, int]:
    return query(db_path, "SELECT t.id, f.name, t.score FROM threads t JOIN forums f ON f.id = t.forum_id "
                          "WHERE t.author_id != 1 ORDER BY t.id LIMIT 1")[0]


# --- seeding -------------------------------------------------------------------------------------------------------

def test_same_seed_gives_byte_identical_db_and_other_seed_differs(tmp_path: Path, seeded: Path):
    again, other = tmp_path / "again.db", tmp_path / "other.db"
    build_db(again, seed=0)
    build_db(other, seed=1)
    assert again.read_bytes() == seeded.read_bytes()
    assert query(other, "SELECT title FROM threads ORDER BY id") != query(again, "SELECT title FROM threads ORDER BY id")


def test_seed_has_realistic_volume(seeded: Path):
    assert query(seeded, "SELECT COUNT(*) FROM forums")[0][0] == 10
    assert query(seeded, "SELECT COUNT(*) FROM threads")[0][0] >= 250
    assert query(seeded, "SELECT COUNT(*) FROM comments")[0][0] >= 1500
    assert query(seeded, "SELECT COUNT(*) FROM comments WHERE parent_id IS NOT NULL")[0][0] > 100
    assert query(seeded, "SELECT display_name FROM users WHERE username = 'alex'") == [("Alex Rivera",)]
    assert query(seeded, "SELECT COUNT(*) FROM threads WHERE author_id = 1")[0][0] >= 3
    titles = [r[0] for r in query(seeded, "SELECT title FROM threads")]
    assert len(set(titles)) == len(titles), "thread titles must be unique so tasks can name them"


def test_missing_database_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="build_db"):
        create_app(tmp_path / "nope.db")


# --- login ---------------------------------------------------------------------------------------------------------

def test_login_page_has_labelled_fields(client):
    html = client.get("/login").get_data(as_text=True)
    assert '<label for="username">Username</label>' in html
    assert '<label for="password">Password</label>' in html
    assert ">Sign in</button>" in html


def test_wrong_password_is_rejected(client):
    response = client.post("/login", data={"username": "alex", "password": "nope"})
    assert response.status_code == 401
    assert "Wrong username or password" in response.get_data(as_text=True)


def test_login_redirects_to_next_and_logout_ends_session(client):
    response = client.get("/submit")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login?next=/submit")
    response = client.post("/login", data={"username": "alex", "password": "confkv", "next": "/submit"})
    assert response.headers["Location"] == "/submit"
    assert "Signed in as" in client.get("/").get_data(as_text=True)
    client.post("/logout")
    assert client.get("/submit").status_code == 302


def test_login_refuses_offsite_next(client):
    response = client.post("/login", data={"username": "alex", "password": "confkv", "next": "//evil.example/x"})
    assert response.headers["Location"] == "/"


def test_anonymous_vote_goes_to_login(client, db_path):
    thread_id, forum, score = other_thread(db_path)
    response = client.post(f"/f/{forum}/{thread_id}/vote", data={"direction": "up", "next": f"/f/{forum}/{thread_id}"})
    assert response.headers["Location"].startswith("/login?next=")
    assert query(db_path, "SELECT score FROM threads WHERE id = ?", thread_id)[0][0] == score


# --- browsing ------------------------------------------------------------------------------------------------------

def test_forum_pagination_links_and_pages_differ(client, db_path):
    n_books = query(db_path, "SELECT COUNT(*) FROM threads t JOIN forums f ON f.id = t.forum_id "
                             "WHERE f.name = 'books'")[0][0]
    first = client.get("/f/books?sort=new").get_data(as_text=True)
    assert ">Next page</a>" in first and ">Previous page</a>" not in first
    second = client.get("/f/books?sort=new&page=2").get_data(as_text=True)
    assert ">Previous page</a>" in second and ">Page 1</a>" in second
    ids_1 = set(re.findall(r'id="thread-(\d+)"', first))
    ids_2 = set(re.findall(r'id="thread-(\d+)"', second))
    assert len(ids_1) == PAGE_SIZE and len(ids_2) == n_books - PAGE_SIZE and not ids_1 & ids_2


def test_sort_orders(client, db_path):
    html = client.get("/f/gaming?sort=top").get_data(as_text=True)
    scores = [int(s) for s in re.findall(r'<span class="score">(-?\d+)</span>', html)]
    assert scores == sorted(scores, reverse=True)
    html = client.get("/f/gaming?sort=new").get_data(as_text=True)
    dates = re.findall(r'class="thread-date" datetime="([^"]+)"', html)
    assert dates == sorted(dates, reverse=True)
    newest = query(db_path, "SELECT t.title FROM threads t JOIN forums f ON f.id = t.forum_id WHERE f.name = 'gaming' "
                            "ORDER BY t.created_at DESC LIMIT 1")[0][0]
    assert newest.replace("'", "&#39;") in html


def test_thread_page_nests_replies(client, db_path):
    child, parent, thread_id, forum = query(
        db_path, "SELECT c.id, c.parent_id, c.thread_id, f.name FROM comments c JOIN threads t ON t.id = c.thread_id "
                 "JOIN forums f ON f.id = t.forum_id WHERE c.parent_id IS NOT NULL LIMIT 1")[0]
    html = client.get(f"/f/{forum}/{thread_id}").get_data(as_text=True)
    parent_at, child_at = html.index(f'id="comment-{parent}"'), html.index(f'id="comment-{child}"')
    assert parent_at < html.index('<ol class="replies">', parent_at) < child_at
    assert f'aria-label="Upvote comment #{child}"' in html


def test_wrong_forum_in_thread_url_redirects(client, db_path):
    thread_id, forum, _ = other_thread(db_path)
    wrong = "books" if forum != "books" else "music"
    assert client.get(f"/f/{wrong}/{thread_id}").headers["Location"] == f"/f/{forum}/{thread_id}"
    assert client.get("/f/nosuchforum").status_code == 404
    assert client.get("/f/books/999999").status_code == 404


def test_search_matches_words_and_filters_by_forum(client, db_path):
    html = client.get("/search?q=skillet").get_data(as_text=True)
    expected = query(db_path, "SELECT COUNT(*) FROM threads WHERE title LIKE '%skillet%' OR body LIKE '%skillet%'")[0][0]
    assert expected > 0 and f"{expected} result" in html
    in_books = client.get("/search?q=skillet&forum=books").get_data(as_text=True)
    assert "0 results" in in_books
    assert "Type some words" in client.get("/search").get_data(as_text=True)


def test_profile_shows_karma_threads_and_comments(client, db_path):
    karma = query(db_path, "SELECT (SELECT SUM(score) FROM threads WHERE author_id = 1) "
                           "+ (SELECT SUM(score) FROM comments WHERE author_id = 1)")[0][0]
    html = client.get("/user/alex").get_data(as_text=True)
    assert f'<span class="karma">{karma}</span>' in html and "Alex Rivera" in html
    n_comments = query(db_path, "SELECT COUNT(*) FROM comments WHERE author_id = 1")[0][0]
    assert f"Comments ({n_comments})" in client.get("/user/alex/comments").get_data(as_text=True)
    assert client.get("/user/nobody").status_code == 404


# --- state changes -------------------------------------------------------------------------------------------------

def test_create_thread(alex, db_path):
    response = alex.post("/submit", data={"forum": "diy", "title": "Shed roof question", "body": "Felt or shingles?"})
    new_id = query(db_path, "SELECT MAX(id) FROM threads")[0][0]
    assert response.headers["Location"] == f"/f/diy/{new_id}"
    html = alex.get(response.headers["Location"]).get_data(as_text=True)
    assert "Shed roof question" in html and "Felt or shingles?" in html


def test_create_thread_validates_input(alex, db_path):
    before = query(db_path, "SELECT COUNT(*) FROM threads")[0][0]
    response = alex.post("/submit", data={"forum": "diy", "title": "  "})
    assert response.status_code == 400 and "Title must not be empty" in response.get_data(as_text=True)
    response = alex.post("/submit", data={"forum": "nowhere", "title": "x"})
    assert "Choose a forum" in response.get_data(as_text=True)
    assert query(db_path, "SELECT COUNT(*) FROM threads")[0][0] == before


def test_comment_and_reply(alex, db_path):
    thread_id, forum, _ = other_thread(db_path)
    response = alex.post(f"/f/{forum}/{thread_id}/comment", data={"body": "Great question!"})
    comment_id = query(db_path, "SELECT MAX(id) FROM comments")[0][0]
    assert response.headers["Location"].endswith(f"#comment-{comment_id}")
    response = alex.post(f"/comment/{comment_id}/reply", data={"body": "Replying to myself."})
    reply = query(db_path, "SELECT parent_id, thread_id, body FROM comments WHERE id = ?", comment_id + 1)
    assert reply == [(comment_id, thread_id, "Replying to myself.")]
    empty = alex.post(f"/f/{forum}/{thread_id}/comment", data={"body": ""})
    assert query(db_path, "SELECT MAX(id) FROM comments")[0][0] == comment_id + 1
    assert "Comment must not be empty" in alex.get(empty.headers["Location"]).get_data(as_text=True)


def test_thread_vote_up_toggle_and_switch(alex, db_path):
    thread_id, forum, score = other_thread(db_path)

    def vote(direction: str) -> int:
        alex.post(f"/f/{forum}/{thread_id}/vote", data={"direction": direction})
        return query(db_path, "SELECT score FROM threads WHERE id = ?", thread_id)[0][0]

    assert vote("up") == score + 1
    assert 'aria-label="Upvote thread" aria-pressed="true"' in alex.get(f"/f/{forum}/{thread_id}").get_data(
        as_text=True)
    assert vote("down") == score - 1
    assert vote("down") == score
    assert alex.post(f"/f/{forum}/{thread_id}/vote", data={"direction": "sideways"}).status_code == 400


def test_comment_vote(alex, db_path):
    comment_id, score = query(db_path, "SELECT id, score FROM comments WHERE author_id != 1 LIMIT 1")[0]
    response = alex.post(f"/comment/{comment_id}/vote", data={"direction": "down"})
    assert response.headers["Location"].endswith(f"#comment-{comment_id}")
    assert query(db_path, "SELECT score FROM comments WHERE id = ?", comment_id)[0][0] == score - 1


def test_edit_own_thread_and_refuse_others(alex, db_path):
    thread_id, forum = alex_thread(db_path)
    assert "Edit thread" in alex.get(f"/f/{forum}/{thread_id}").get_data(as_text=True)
    alex.post(f"/f/{forum}/{thread_id}/edit", data={"title": "Edited title", "body": "New body"})
    assert query(db_path, "SELECT title, body FROM threads WHERE id = ?", thread_id) == [("Edited title", "New body")]
    assert "(edited" in alex.get(f"/f/{forum}/{thread_id}").get_data(as_text=True)
    other_id, other_forum, _ = other_thread(db_path)
    assert alex.post(f"/f/{other_forum}/{other_id}/edit", data={"title": "Hijack"}).status_code == 403


def test_edit_own_comment_and_refuse_others(alex, db_path):
    own = query(db_path, "SELECT id FROM comments WHERE author_id = 1 LIMIT 1")[0][0]
    alex.post(f"/comment/{own}/edit", data={"body": "Corrected comment"})
    assert query(db_path, "SELECT body FROM comments WHERE id = ?", own)[0][0] == "Corrected comment"
    other = query(db_path, "SELECT id FROM comments WHERE author_id != 1 LIMIT 1")[0][0]
    assert alex.post(f"/comment/{other}/edit", data={"body": "x"}).status_code == 403
    assert alex.post(f"/comment/{own}/edit", data={"body": " "}).status_code == 400


def test_reset_by_overwriting_file_is_seen_at_once(alex, db_path, seeded):
    thread_id, forum = alex_thread(db_path)
    alex.post(f"/f/{forum}/{thread_id}/edit", data={"title": "Temporary", "body": ""})
    db_path.write_bytes(seeded.read_bytes())
    assert "Temporary" not in alex.get(f"/f/{forum}/{thread_id}").get_data(as_text=True)
