"""Queries behind the forum pages: listings with sort and pagination, comment trees, votes and karma.

Kept out of the views so each route reads as "fetch, render" and the SQL lives in one place. Every function takes an
open connection; the app opens a fresh one per request so a reset that rewrites the DB file is seen at once.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from envs.forum.seed import SITE_NOW, TIME_FORMAT
from envs.webapp import LIKE, like_contains, open_db, site_now

PAGE_SIZE = 20
SORTS = ("hot", "new", "top")

_THREAD_SELECT = """
SELECT t.*, f.name AS forum_name, f.title AS forum_title, u.username AS author, u.display_name AS author_name,
       (SELECT COUNT(*) FROM comments c WHERE c.thread_id = t.id) AS n_comments
FROM threads t JOIN forums f ON f.id = t.forum_id JOIN users u ON u.id = t.author_id
"""
_ORDER_BY = {
    "hot": "hot(t.score, t.created_at) DESC, t.id DESC",
    "new": "t.created_at DESC, t.id DESC",
    "top": "t.score DESC, t.id DESC",
}


def hot(score: int, created_at: str) -> float:
    """Reddit-style decay measured from the fixed SITE_NOW, so the hot order is the same on every replay."""
    age_hours = max(0.0, (SITE_NOW - datetime.strptime(created_at, TIME_FORMAT)).total_seconds() / 3600)
    return score / (age_hours + 2) ** 1.5


def connect(db_path: Path) -> sqlite3.Connection:
    if not Path(db_path).exists():
        raise FileNotFoundError(f"forum database not found at {db_path}; build it with envs.forum.seed.build_db")
    conn = open_db(db_path)
    conn.create_function("hot", 2, hot, deterministic=True)
    return conn


def now_stamp() -> str:
    """Time for new posts: the site clock (`envs.webapp.SiteClock`), never before the seeded data's fixed now."""
    return max(site_now(), SITE_NOW).strftime(TIME_FORMAT)


@dataclass
class Page:
    items: list[sqlite3.Row]
    page: int
    n_pages: int
    total: int

    def window(self, radius: int = 3) -> range:
        """Page numbers to link around the current one; keeps pagination short on long listings."""
        return range(max(1, self.page - radius), min(self.n_pages, self.page + radius) + 1)


def _paginate(conn: sqlite3.Connection, sql: str, params: list, page: int) -> Page:
    total = conn.execute(f"SELECT COUNT(*) FROM ({sql})", params).fetchone()[0]
    n_pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(1, page), n_pages)
    rows = conn.execute(f"{sql} LIMIT ? OFFSET ?", [*params, PAGE_SIZE, (page - 1) * PAGE_SIZE]).fetchall()
    return Page(rows, page, n_pages, total)


def list_threads(conn: sqlite3.Connection, *, forum_id: int | None = None, author_id: int | None = None,
                 query: str | None = None, sort: str = "hot", page: int = 1) -> Page:
    """Threads filtered by forum / author / search words (all words must appear in title or body)."""
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; expected one of {', '.join(SORTS)}")
    where, params = [], []
    if forum_id is not None:
        where.append("t.forum_id = ?")
        params.append(forum_id)
    if author_id is not None:
        where.append("t.author_id = ?")
        params.append(author_id)
    for term in (query or "").split():
        where.append(f"(t.title {LIKE} OR t.body {LIKE})")
        params += [like_contains(term)] * 2
    sql = _THREAD_SELECT + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {_ORDER_BY[sort]}"
    return _paginate(conn, sql, params, page)


def get_thread(conn: sqlite3.Connection, thread_id: int) -> sqlite3.Row | None:
    return conn.execute(_THREAD_SELECT + " WHERE t.id = ?", [thread_id]).fetchone()


def get_forum(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM forums WHERE name = ?", [name]).fetchone()


def list_forums(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute("""SELECT f.*, COUNT(t.id) AS n_threads FROM forums f LEFT JOIN threads t ON t.forum_id = f.id
                           GROUP BY f.id ORDER BY f.title""").fetchall()


def get_user(conn: sqlite3.Connection, *, username: str | None = None, user_id: int | None = None):
    if username is not None:
        return conn.execute("SELECT * FROM users WHERE username = ?", [username]).fetchone()
    return conn.execute("SELECT * FROM users WHERE id = ?", [user_id]).fetchone()


def get_comment(conn: sqlite3.Connection, comment_id: int) -> sqlite3.Row | None:
    return conn.execute("""SELECT c.*, u.username AS author, t.title AS thread_title, f.name AS forum_name
                           FROM comments c JOIN users u ON u.id = c.author_id JOIN threads t ON t.id = c.thread_id
                           JOIN forums f ON f.id = t.forum_id WHERE c.id = ?""", [comment_id]).fetchone()


@dataclass
class CommentNode:
    row: sqlite3.Row
    children: list[CommentNode] = field(default_factory=list)


def comment_tree(conn: sqlite3.Connection, thread_id: int) -> list[CommentNode]:
    """Top-level comments best first (score, then age); replies under their parent in posting order."""
    rows = conn.execute("""SELECT c.*, u.username AS author FROM comments c JOIN users u ON u.id = c.author_id
                           WHERE c.thread_id = ? ORDER BY c.created_at, c.id""", [thread_id]).fetchall()
    nodes = {row["id"]: CommentNode(row) for row in rows}
    roots: list[CommentNode] = []
    for node in nodes.values():
        parent = node.row["parent_id"]
        (nodes[parent].children if parent in nodes else roots).append(node)
    roots.sort(key=lambda n: (-n.row["score"], n.row["created_at"], n.row["id"]))
    return roots


def user_comments(conn: sqlite3.Connection, user_id: int, page: int = 1) -> Page:
    sql = """SELECT c.*, t.title AS thread_title, f.name AS forum_name FROM comments c
             JOIN threads t ON t.id = c.thread_id JOIN forums f ON f.id = t.forum_id
             WHERE c.author_id = ? ORDER BY c.created_at DESC, c.id DESC"""
    return _paginate(conn, sql, [user_id], page)


def karma(conn: sqlite3.Connection, user_id: int) -> int:
    """Sum of the scores of everything the user posted, as Reddit-like sites show it."""
    row = conn.execute("""SELECT (SELECT COALESCE(SUM(score), 0) FROM threads WHERE author_id = :u)
                               + (SELECT COALESCE(SUM(score), 0) FROM comments WHERE author_id = :u)""",
                       {"u": user_id}).fetchone()
    return row[0]


def user_votes(conn: sqlite3.Connection, user_id: int | None, target_type: str) -> dict[int, int]:
    if user_id is None:
        return {}
    rows = conn.execute("SELECT target_id, value FROM votes WHERE user_id = ? AND target_type = ?",
                        [user_id, target_type])
    return {r["target_id"]: r["value"] for r in rows}


def cast_vote(conn: sqlite3.Connection, user_id: int, target_type: str, target_id: int, direction: str) -> int:
    """Record an up/down vote; repeating the same vote withdraws it. Returns the target's new score."""
    values = {"up": 1, "down": -1}
    if direction not in values:
        raise ValueError(f"vote direction must be 'up' or 'down', got {direction!r}")
    table = {"thread": "threads", "comment": "comments"}[target_type]
    old = conn.execute("SELECT value FROM votes WHERE user_id = ? AND target_type = ? AND target_id = ?",
                       [user_id, target_type, target_id]).fetchone()
    old_value = old["value"] if old else 0
    new_value = 0 if old_value == values[direction] else values[direction]
    if new_value:
        conn.execute("INSERT OR REPLACE INTO votes VALUES (?, ?, ?, ?)", [user_id, target_type, target_id, new_value])
    else:
        conn.execute("DELETE FROM votes WHERE user_id = ? AND target_type = ? AND target_id = ?",
                     [user_id, target_type, target_id])
    conn.execute(f"UPDATE {table} SET score = score + ? WHERE id = ?", [new_value - old_value, target_id])
    conn.commit()
    return conn.execute(f"SELECT score FROM {table} WHERE id = ?", [target_id]).fetchone()[0]
