"""Deterministic seed data for the classifieds site.

Everything comes from `random.Random(seed)` and the word lists in `words.py`, and timestamps are relative to a fixed
date, so the same seed rebuilds the same database byte for byte: task answers read from seed 0 stay valid.
The account `alex` owns a fixed set of listings and has message threads, so tasks can refer to them by name.
"""

from __future__ import annotations

import pathlib
import random
import sqlite3
from datetime import datetime, timedelta

from envs.classifieds import words as W
from envs.webapp import fresh_db_file, pbkdf2_hex

BASE_TIME = datetime(2024, 6, 1, 12, 0)
FIRST_LISTING_ID = 1001
ALEX = ("alex", "confkv", "Alex Rivera", "Elmwood")

# Categories and how many random listings each gets (alex's own listings come on top).
CATEGORY_SIZES = {"vehicles": 40, "electronics": 48, "furniture": 44, "housing": 36, "jobs": 28, "sports": 36,
                  "music": 30, "appliances": 34}

# alex's own listings: (category, title, price in dollars, condition, description, image alt text, days ago)
ALEX_LISTINGS = [
    ("vehicles", "2014 Honda Civic LX, white", 8900, "Good",
     "White 2014 Honda Civic LX with 112,000 miles. Automatic, clean title, new tires last spring. "
     "Asking $8,900. Pickup in Elmwood.", "White Honda Civic sedan parked in a driveway", 6),
    ("furniture", "Walnut dining table with 4 chairs", 450, "Good",
     "Solid walnut dining table, 72 x 36 inches, with four matching chairs. Light scratches on the top. "
     "Must pick up; no delivery.", "Walnut dining table with four chairs in a dining room", 12),
    ("electronics", "Canon EOS Rebel T7 camera with two batteries", 380, "Like new",
     "Canon EOS Rebel T7 with the 18-55mm kit lens, two batteries, charger and strap. Shutter count about 4,100.",
     "Black Canon camera with a kit lens on a wooden desk", 3),
    ("sports", "Trek FX 3 hybrid bike, 54 cm frame", 520, "Good",
     "Trek FX 3 hybrid bike, 54 cm frame, carbon fork, hydraulic disc brakes. Serviced in April.",
     "Grey Trek hybrid bike leaning against a brick wall", 20),
    ("music", "Yamaha FG800 acoustic guitar with gig bag", 160, "Like new",
     "Yamaha FG800 acoustic guitar, natural finish, new strings, comes with a padded gig bag and a tuner.",
     "Acoustic guitar with a natural wood finish on a stand", 9),
    ("appliances", "KitchenAid stand mixer, empire red", 220, "Good",
     "KitchenAid Artisan 5-quart stand mixer in empire red with the dough hook, whisk and flat beater.",
     "Red stand mixer on a kitchen counter", 27),
]

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password_hash TEXT NOT NULL,
  display_name TEXT NOT NULL, location TEXT NOT NULL, member_since TEXT NOT NULL, phone TEXT NOT NULL);
CREATE TABLE categories (id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, name TEXT NOT NULL);
CREATE TABLE listings (id INTEGER PRIMARY KEY, seller_id INTEGER NOT NULL REFERENCES users(id),
  category_id INTEGER NOT NULL REFERENCES categories(id), title TEXT NOT NULL, price_cents INTEGER NOT NULL,
  condition TEXT, location TEXT NOT NULL, posted_at TEXT NOT NULL, description TEXT NOT NULL,
  image_alt TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'active');
CREATE TABLE threads (id INTEGER PRIMARY KEY, listing_id INTEGER NOT NULL REFERENCES listings(id),
  buyer_id INTEGER NOT NULL REFERENCES users(id), seller_id INTEGER NOT NULL REFERENCES users(id),
  subject TEXT NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY, thread_id INTEGER NOT NULL REFERENCES threads(id),
  sender_id INTEGER NOT NULL REFERENCES users(id), body TEXT NOT NULL, sent_at TEXT NOT NULL,
  is_read INTEGER NOT NULL DEFAULT 0);
CREATE TABLE favourites (user_id INTEGER NOT NULL REFERENCES users(id),
  listing_id INTEGER NOT NULL REFERENCES listings(id), PRIMARY KEY (user_id, listing_id));
CREATE INDEX listings_category ON listings(category_id, status);
CREATE INDEX messages_thread ON messages(thread_id);
"""


def hash_password(username: str, password: str) -> str:
    """Salted PBKDF2 with the username as salt: deterministic (so seeding stays byte-identical) yet not plaintext."""
    return pbkdf2_hex(password, username, 1000)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _users(rng: random.Random) -> list[tuple]:
    names = [(f, last) for f in W.FIRST_NAMES for last in W.LAST_NAMES]
    rng.shuffle(names)
    rows = [(1, ALEX[0], hash_password(ALEX[0], ALEX[1]), ALEX[2], ALEX[3], "2019-03-14", "555-0100")]
    seen_first: set[str] = {"Alex"}
    for first, last in names:
        if first in seen_first:  # unique first names keep "reply from Morgan" unambiguous in tasks
            continue
        seen_first.add(first)
        uid = len(rows) + 1
        username = f"{first.lower()}{last[0].lower()}"
        since = (BASE_TIME - timedelta(days=rng.randrange(60, 2400))).strftime("%Y-%m-%d")
        phone = f"555-{rng.randrange(101, 9999):04d}"
        rows.append((uid, username, hash_password(username, f"{username}-pw"), f"{first} {last}",
                     rng.choice(W.LOCATIONS), since, phone))
    return rows


def _vehicle(rng: random.Random) -> tuple:
    make = rng.choice(sorted(W.CAR_MODELS))
    model = rng.choice(W.CAR_MODELS[make])
    year = rng.randrange(2004, 2022)
    colour = rng.choice(W.COLOURS)
    trim = rng.choice(W.CAR_TRIMS)
    miles = rng.randrange(8, 60) * 1000 + (2024 - year) * rng.randrange(6000, 11000)
    value = 30000 * 0.9 ** (2024 - year) * max(0.3, 1 - miles / 400_000) * rng.uniform(0.85, 1.15)
    price = max(1200, int(value) // 100 * 100)
    title = f"{year} {make} {model} {trim}, {colour}"
    desc = (f"{colour.capitalize()} {year} {make} {model} {trim} with {miles:,} miles. "
            f"{rng.choice(['Automatic', 'Manual'])} transmission. {rng.choice(W.CAR_NOTES)}")
    return title, price * 100, rng.choice(W.CONDITIONS[1:4]), desc, f"{colour.capitalize()} {make} {model} parked on a street"


def _goods(rng: random.Random, items: list[tuple], extras: list[str], notes: list[str]) -> tuple:
    stem, low, high = rng.choice(items)
    extra = rng.choice(extras)
    title = f"{stem} {extra}".strip()
    title = title[0].upper() + title[1:]
    price = rng.randrange(low, high + 1)
    price_cents = (price // 5 * 5) * 100 if rng.random() < 0.8 else price * 100 + rng.choice([0, 50, 99])
    condition = rng.choice(W.CONDITIONS)
    desc = f"{title}. Condition: {condition.lower()}. {rng.choice(notes)} {rng.choice(W.GOODS_NOTES)}"
    return title, price_cents, condition, desc, f"Photo of the {stem} on a plain background"


def _furniture(rng: random.Random) -> tuple:
    item, low, high, upholstered = rng.choice(W.FURNITURE_ITEMS)
    material = rng.choice(W.FABRICS if upholstered else W.WOODS)
    extra = rng.choice(W.FURNITURE_EXTRAS)
    title = f"{material.capitalize()} {item} {extra}".strip()
    condition = rng.choice(W.CONDITIONS[:4])
    price = rng.randrange(low, high + 1) // 5 * 5
    desc = f"{material.capitalize()} {item}, {rng.randrange(2, 15)} years old. {rng.choice(W.FURNITURE_NOTES)}"
    return title, price * 100, condition, desc, f"{material.capitalize()} {item} in a living room"


def _housing(rng: random.Random) -> tuple:
    kind, low, high = rng.choice(W.HOUSING_TYPES)
    beds = 0 if kind == "studio" else (1 if kind.startswith("room") else rng.randrange(1, 5))
    hood = rng.choice(W.LOCATIONS)
    feature = rng.choice(W.HOUSING_FEATURES)
    head = kind.capitalize() if beds == 0 or kind.startswith("room") else f"{beds}-bedroom {kind}"
    title = f"{head} with {feature} in {hood}"
    rent = (rng.randrange(low, high + 1) + beds * 150) // 25 * 25
    sqft = 350 + beds * 320 + rng.randrange(0, 300)
    avail = (BASE_TIME + timedelta(days=rng.randrange(3, 60))).strftime("%B %-d")
    desc = (f"{head} of about {sqft} sq ft with {feature}. Rent ${rent:,} per month. Available {avail}. "
            f"{rng.choice(W.HOUSING_NOTES)}")
    return title, rent * 100, None, desc, f"Front view of the {kind} in {hood}", hood


def _job(rng: random.Random) -> tuple:
    role, low, high = rng.choice(W.JOB_ROLES)
    business = rng.choice(W.JOB_BUSINESSES)
    schedule = rng.choice(W.JOB_SCHEDULES)
    pay = rng.randrange(low * 2, high * 2 + 1) / 2
    title = f"{role} at {business} ({schedule})"
    desc = (f"{business} is hiring a {role.lower()}, {schedule}. Pay ${pay:.2f} per hour. "
            f"Apply by message with a short note about your experience.")
    return title, int(pay * 100), None, desc, f"Logo of {business}"


def _listing(rng: random.Random, slug: str) -> tuple:
    """Return (title, price_cents, condition, description, image_alt, location or None) for one category."""
    if slug == "vehicles":
        return (*_vehicle(rng), None)
    if slug == "electronics":
        return (*_goods(rng, W.ELECTRONICS, W.ELECTRONICS_EXTRAS, W.ELECTRONICS_NOTES), None)
    if slug == "furniture":
        return (*_furniture(rng), None)
    if slug == "housing":
        return _housing(rng)
    if slug == "jobs":
        return (*_job(rng), None)
    if slug == "sports":
        return (*_goods(rng, W.SPORTS_ITEMS, W.GOODS_EXTRAS, W.GOODS_NOTES), None)
    if slug == "music":
        return (*_goods(rng, W.MUSIC_ITEMS, W.GOODS_EXTRAS + ["with case"], W.GOODS_NOTES), None)
    if slug == "appliances":
        return (*_goods(rng, W.APPLIANCE_ITEMS, W.GOODS_EXTRAS + ["works great"], W.GOODS_NOTES), None)
    raise ValueError(f"unknown category slug {slug!r}")


def _listings(rng: random.Random, users: list[tuple]) -> list[tuple]:
    """All listings sorted by posting time, so ids grow with the date as on a real site."""
    cat_ids = {slug: i + 1 for i, (slug, _) in enumerate(W.CATEGORIES)}
    titles: set[str] = {t for _, t, *_ in ALEX_LISTINGS}
    drafts = []
    for category, title, price, cond, desc, alt, days in ALEX_LISTINGS:
        drafts.append((1, cat_ids[category], title, price * 100, cond, ALEX[3],
                       _stamp(BASE_TIME - timedelta(days=days, minutes=rng.randrange(600))), desc, alt))
    for slug, count in CATEGORY_SIZES.items():
        made = attempts = 0
        while made < count:
            attempts += 1
            if attempts > count * 50:
                raise RuntimeError(f"word lists too small for {count} unique {slug} titles")
            title, price_cents, cond, desc, alt, loc = _listing(rng, slug)
            if title in titles:
                continue
            titles.add(title)
            seller = rng.choice(users[1:])
            location = loc or seller[4]
            if slug not in ("housing", "jobs"):
                desc = f"{desc} {rng.choice(W.CLOSINGS).format(location=location)}"
            posted = _stamp(BASE_TIME - timedelta(minutes=rng.randrange(90 * 24 * 60)))
            drafts.append((seller[0], cat_ids[slug], title, price_cents, cond, location, posted, desc, alt))
            made += 1
    drafts.sort(key=lambda d: (d[6], d[2]))
    return [(FIRST_LISTING_ID + i, *d) for i, d in enumerate(drafts)]


def _conversation(rng: random.Random, title: str, price_cents: int) -> list[tuple[str, str]]:
    """A buyer/seller exchange as (role, text) pairs; an offer and a meeting plan give tasks facts to look up."""
    offer = int(price_cents / 100 * rng.uniform(0.75, 0.92)) // 10 * 10
    spot, day = rng.choice(W.MEETING_SPOTS), rng.choice(W.WEEKDAYS)
    hour = rng.randrange(9, 19)
    question, answer = rng.choice(W.QUESTIONS_AND_ANSWERS)
    lines = [("buyer", f"{rng.choice(W.BUYER_OPENERS).format(title=title)} {question}"), ("seller", answer)]
    if rng.random() < 0.7:
        lines.append(("buyer", f"Would you take ${offer:,} for it?"))
        lines.append(("seller", rng.choice(["Let me think about it.", "That's a bit low, but maybe.",
                                            f"I could do ${(offer + price_cents // 100) // 2:,}."])))
    lines.append(("buyer", f"Great. Can we meet at {spot} on {day} at {hour % 12 or 12}:00 "
                           f"{'am' if hour < 12 else 'pm'}?"))
    return lines[: rng.randrange(3, len(lines) + 1)]


def _threads(rng: random.Random, users: list[tuple], listings: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """Threads about alex's listings (alex sells), listings alex asked about (alex buys), and others' traffic."""
    goods_cats = {i + 1 for i, (slug, _) in enumerate(W.CATEGORIES) if slug not in ("housing", "jobs")}
    mine = [li for li in listings if li[1] == 1]
    others = [li for li in listings if li[1] != 1 and li[2] in goods_cats]
    pairs = [(u[0], li) for u, li in zip(rng.sample(users[1:], 5), mine[:5], strict=True)]
    pairs += [(1, li) for li in rng.sample(others, 4)]
    pairs += [(rng.choice(users[1:])[0], li) for li in rng.sample(others, 40)]
    threads, messages = [], []
    for buyer_id, li in pairs:
        if buyer_id == li[1]:
            buyer_id = users[1][0] if li[1] != users[1][0] else users[2][0]
        tid = len(threads) + 1
        threads.append((tid, li[0], buyer_id, li[1], f"About: {li[3]}"))
        moment = datetime.strptime(li[7], "%Y-%m-%d %H:%M") + timedelta(hours=rng.randrange(2, 48))
        convo = _conversation(rng, li[3], li[4])
        for n, (role, text) in enumerate(convo):
            moment += timedelta(minutes=rng.randrange(20, 900))
            is_last = n == len(convo) - 1
            messages.append((len(messages) + 1, tid, buyer_id if role == "buyer" else li[1], text, _stamp(moment),
                             0 if is_last and rng.random() < 0.5 else 1))
    return threads, messages


def build_db(db_path: pathlib.Path, seed: int = 0) -> None:
    """Create the schema and deterministic data at `db_path`, replacing any existing file."""
    db_path = fresh_db_file(db_path)
    rng = random.Random(seed)
    users = _users(rng)
    listings = _listings(rng, users)
    threads, messages = _threads(rng, users, listings)
    favourites = sorted({(1, li[0]) for li in rng.sample([li for li in listings if li[1] != 1], 3)})
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        conn.executemany("INSERT INTO users VALUES (?,?,?,?,?,?,?)", users)
        conn.executemany("INSERT INTO categories VALUES (?,?,?)",
                         [(i + 1, slug, name) for i, (slug, name) in enumerate(W.CATEGORIES)])
        conn.executemany("INSERT INTO listings VALUES (?,?,?,?,?,?,?,?,?,?,'active')", listings)
        conn.executemany("INSERT INTO threads VALUES (?,?,?,?,?)", threads)
        conn.executemany("INSERT INTO messages VALUES (?,?,?,?,?,?)", messages)
        conn.executemany("INSERT INTO favourites VALUES (?,?)", favourites)
        conn.commit()
    finally:
        conn.close()
