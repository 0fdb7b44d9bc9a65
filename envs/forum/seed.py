"""Schema and deterministic seed data for the forum site.

Everything comes from one `random.Random(seed)` and the hand-written lists in `wordlists.py`, inserted in a fixed
order, so the same seed yields byte-identical databases: task answers quote this data, and a per-episode reset must
restore exactly the state the task was written against.
"""

from __future__ import annotations

import random
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

from envs.forum import wordlists as words
from envs.webapp import fresh_db_file, pbkdf2_hex

# The site's fixed "now": seeded timestamps lie before it and hot ranking measures age from it, so orderings do not
# drift with the wall clock between the day a task was written and the day it is replayed.
SITE_NOW = datetime(2024, 6, 1, 12, 0)
TIME_FORMAT = "%Y-%m-%d %H:%M"
FIRST_COMMENT_ID = 5001  # keeps comment numbers visibly distinct from thread numbers
PBKDF2_ITERATIONS = 1000  # local test site: fast logins matter more than brute-force resistance

SEED_ACCOUNT = ("alex", "confkv", "Alex Rivera")
OTHER_PASSWORD = "forum-pass"

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    display_name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    bio TEXT NOT NULL,
    joined_at TEXT NOT NULL
);
CREATE TABLE forums (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE TABLE threads (
    id INTEGER PRIMARY KEY,
    forum_id INTEGER NOT NULL REFERENCES forums(id),
    author_id INTEGER NOT NULL REFERENCES users(id),
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    score INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    edited_at TEXT
);
CREATE TABLE comments (
    id INTEGER PRIMARY KEY,
    thread_id INTEGER NOT NULL REFERENCES threads(id),
    parent_id INTEGER REFERENCES comments(id),
    author_id INTEGER NOT NULL REFERENCES users(id),
    body TEXT NOT NULL,
    score INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    edited_at TEXT
);
CREATE TABLE votes (
    user_id INTEGER NOT NULL REFERENCES users(id),
    target_type TEXT NOT NULL CHECK (target_type IN ('thread', 'comment')),
    target_id INTEGER NOT NULL,
    value INTEGER NOT NULL CHECK (value IN (-1, 1)),
    PRIMARY KEY (user_id, target_type, target_id)
);
CREATE INDEX threads_forum ON threads(forum_id);
CREATE INDEX threads_author ON threads(author_id);
CREATE INDEX comments_thread ON comments(thread_id);
CREATE INDEX comments_author ON comments(author_id);
"""


def hash_password(password: str, salt: str) -> str:
    """Werkzeug-compatible pbkdf2 hash with a caller-chosen salt, so seeding stays deterministic."""
    return f"pbkdf2:sha256:{PBKDF2_ITERATIONS}${salt}${pbkdf2_hex(password, salt, PBKDF2_ITERATIONS)}"


def _stamp(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


_ARTICLE_RE = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])(?!uk)")


def _fill(template: str, rng: random.Random, nouns: list[str], activities: list[str]) -> str:
    noun, noun2 = rng.sample(nouns, 2)
    adj = rng.choice(words.ADJECTIVES)
    text = template.format(noun=noun, noun2=noun2, adj=adj, Adj=adj.capitalize(), activity=rng.choice(activities),
                           price=rng.choice([15, 25, 40, 60, 80, 120, 150, 200, 350]), n=rng.randint(2, 30))
    return _ARTICLE_RE.sub(r"\1n ", text)  # "a audiobook" -> "an audiobook" ("a ukulele" stays)


def _make_users(rng: random.Random) -> list[tuple]:
    username, password, display = SEED_ACCOUNT
    forum_titles = [meta[0].lower() for meta in words.FORUMS.values()]
    rows = [(1, username, display, hash_password(password, "seed-alex"), "Weekend cook, occasional builder.",
             "2021-03-14 09:30")]
    taken = {username}
    while len(rows) < 40:
        first, last = rng.choice(words.FIRST_NAMES), rng.choice(words.LAST_NAMES)
        name = f"{first.lower()}_{rng.choice(words.USERNAME_SUFFIXES)}".replace("__", "_")
        if name in taken or first == "Alex":
            continue
        taken.add(name)
        a, b = rng.sample(forum_titles, 2)
        joined = SITE_NOW - timedelta(days=rng.randint(200, 1800), minutes=rng.randint(0, 1439))
        salt = f"seed-{rng.getrandbits(32):08x}"
        rows.append((len(rows) + 1, name, f"{first} {last}", hash_password(OTHER_PASSWORD, salt),
                     f"Mostly here for {a} and {b}.", _stamp(joined)))
    return rows


def _make_threads(rng: random.Random, n_users: int) -> list[dict]:
    """Threads for every forum, then sorted by time so ids grow with creation date like on a real site."""
    threads: list[dict] = []
    titles: set[str] = set()
    for forum_id, (_name, (_title, _desc, nouns, activities)) in enumerate(words.FORUMS.items(), start=1):
        for _ in range(rng.randint(26, 34)):
            title = _fill(rng.choice(words.TITLE_TEMPLATES), rng, nouns, activities)
            while title in titles:
                title = _fill(rng.choice(words.TITLE_TEMPLATES), rng, nouns, activities)
            titles.add(title)
            parts = [_fill(rng.choice(words.BODY_OPENERS), rng, nouns, activities)]
            parts += [_fill(t, rng, nouns, activities) for t in rng.sample(words.BODY_MIDDLES, rng.randint(1, 2))]
            parts.append(rng.choice(words.BODY_CLOSERS))
            body = " ".join(parts[:2]) + "\n\n" + " ".join(parts[2:])
            created = SITE_NOW - timedelta(minutes=rng.randint(30, 60 * 24 * 120))
            threads.append({"forum_id": forum_id, "author_id": rng.randint(2, n_users), "title": title,
                            "body": body, "score": int(rng.expovariate(1 / 40)) - rng.randint(0, 5),
                            "created": created, "nouns": nouns, "activities": activities})
    threads.sort(key=lambda t: (t["created"], t["title"]))
    for index in rng.sample(range(len(threads)), 6):  # alex's own threads
        threads[index]["author_id"] = 1
    return threads


def _make_comments(rng: random.Random, threads: list[dict], n_users: int) -> list[tuple]:
    rows: list[tuple] = []
    next_id = FIRST_COMMENT_ID
    for thread_id, thread in enumerate(threads, start=1):
        moment = thread["created"]
        in_thread: list[int] = []
        for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 18])):
            moment = min(moment + timedelta(minutes=rng.randint(3, 600)), SITE_NOW - timedelta(minutes=1))
            parent = rng.choice(in_thread) if in_thread and rng.random() < 0.4 else None
            n_sentences = rng.randint(1, 3)
            body = " ".join(_fill(rng.choice(words.COMMENT_SENTENCES), rng, thread["nouns"], thread["activities"])
                            for _ in range(n_sentences))
            author = 1 if rng.random() < 0.02 else rng.randint(2, n_users)
            score = int(rng.expovariate(1 / 6)) - rng.randint(0, 2)
            rows.append((next_id, thread_id, parent, author, body, score, _stamp(moment)))
            in_thread.append(next_id)
            next_id += 1
    return rows


def build_db(db_path: Path, seed: int = 0) -> None:
    """Create the forum database at `db_path` (replacing any file there) with data derived only from `seed`."""
    db_path = fresh_db_file(db_path)
    rng = random.Random(seed)
    users = _make_users(rng)
    threads = _make_threads(rng, len(users))
    comments = _make_comments(rng, threads, len(users))
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)", users)
        conn.executemany("INSERT INTO forums VALUES (?, ?, ?, ?)",
                         [(i, name, title, desc) for i, (name, (title, desc, _n, _a)) in
                          enumerate(words.FORUMS.items(), start=1)])
        conn.executemany(
            "INSERT INTO threads (id, forum_id, author_id, title, body, score, created_at) VALUES (?,?,?,?,?,?,?)",
            [(i, t["forum_id"], t["author_id"], t["title"], t["body"], t["score"], _stamp(t["created"]))
             for i, t in enumerate(threads, start=1)])
        conn.executemany(
            "INSERT INTO comments (id, thread_id, parent_id, author_id, body, score, created_at) VALUES (?,?,?,?,?,?,?)",
            comments)
        conn.commit()
    finally:
        conn.close()
