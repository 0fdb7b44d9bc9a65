"""All three sites answer hostile-but-fair inputs with 400 and a message (never 500), through one shared guard
(`envs.webapp.install_input_guard`); each site's session secret is random per instance, so a cookie forged with
the old hard-coded key signs nobody in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flask.sessions import SecureCookieSessionInterface

from envs.sites import get_site

LONG_QUERY = " ".join(f"w{i}" for i in range(1200))
# (site, path): where each site takes prices, pages, search text and ids
PAGES = {
    "shopping": ("/search?q=mug", "/search", "/product/{id}"),
    "classifieds": ("/search?q=bike", "/search", "/listing/{id}"),
    "forum": ("/search?q=coffee", "/search", "/f/coffee/{id}"),
}
HOSTILE = [
    ("min_price=inf", "price"), ("min_price=nan", "price"), ("max_price=1e400", "price"),
    ("page=99999999999999999999999", "page"), ("page=%C2%B2", "page"), (f"q={LONG_QUERY}", "search"),
]  # fmt: skip
OLD_KEYS = {"shopping": "confkv-onestopshop-local-only", "classifieds": "confkv-classifieds-local-only",
            "forum": "confkv-forum-fixed-secret"}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(PAGES))
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    spec = get_site(request.param)
    path: Path = tmp_path_factory.mktemp(spec.name) / "site.db"
    spec.build_db(path, seed=0)
    application = spec.create_app(path)
    application.config["SITE_NAME"] = spec.name
    return application


@pytest.mark.parametrize("query, word", HOSTILE)
def test_hostile_query_parameters_are_400_with_a_message(app, query: str, word: str) -> None:
    listing, search, _ = PAGES[app.config["SITE_NAME"]]
    client = app.test_client()
    for base in (listing, search):
        sep = "&" if "?" in base else "?"
        response = client.get(f"{base}{sep}{query}")
        assert response.status_code == 400, (base, query, response.status_code)
        text = response.get_data(as_text=True)
        assert word in text.lower() and len(text) < 20_000


def test_huge_ids_in_paths_are_400(app) -> None:
    _, _, item = PAGES[app.config["SITE_NAME"]]
    client = app.test_client()
    response = client.get(item.format(id="9" * 30))
    assert response.status_code == 400 and "out of range" in response.get_data(as_text=True)
    assert client.get(item.format(id=999_999)).status_code == 404  # a plausible id that does not exist


def test_ordinary_inputs_still_work(app) -> None:
    listing, _, _ = PAGES[app.config["SITE_NAME"]]
    client = app.test_client()
    for query in ("page=2", "min_price=10&max_price=500", "q=blue+mug"):
        assert client.get(f"{listing}&{query}").status_code == 200


def test_a_cookie_forged_with_the_old_constant_key_signs_nobody_in(app) -> None:
    forger = SecureCookieSessionInterface()

    class Fake:
        secret_key = OLD_KEYS[app.config["SITE_NAME"]]
        config = app.config | {"SECRET_KEY": OLD_KEYS[app.config["SITE_NAME"]]}

    serializer = forger.get_signing_serializer(Fake)  # type: ignore[arg-type]
    forged = serializer.dumps({"user_id": 1})  # with the old constant key this signed in as user 1 on every site
    assert app.secret_key != OLD_KEYS[app.config["SITE_NAME"]]
    client = app.test_client()
    client.set_cookie(app.config.get("SESSION_COOKIE_NAME", "session"), forged)
    response = client.get("/")
    assert "sign out" not in response.get_data(as_text=True).lower()  # still anonymous
    real = app.test_client()
    assert real.post("/login", data={"username": "alex", "password": "confkv"}).status_code == 302
    assert "sign out" in real.get("/").get_data(as_text=True).lower()  # the real login shows the sign-out control


# --- second round (issue 38): cross-site posts, sessions after sign-out, LIKE wildcards, huge form fields ---------

ALEX = {"username": "alex", "password": "confkv"}
# A page only a signed-in user may open, and a state change a signed-in user may make, per site.
PRIVATE = {"shopping": "/orders", "classifieds": "/messages", "forum": "/submit"}
CHANGE = {"shopping": ("/cart/add", {"product_id": "1", "quantity": "1"}, "/cart", 'href="/product/1"'),
          "classifieds": ("/listing/1/favourite", {}, "/favourites", 'href="/listing/1"'),
          "forum": ("/submit", {"forum": "cooking", "title": "csrf-probe", "body": "x"}, "/search?q=csrf-probe",
                    "csrf-probe</a>")}  # fmt: skip
FOUND = {"shopping": "mug", "classifieds": "bike", "forum": "budget"}  # words the seeded rows do hold
ITEM_LINK = re.compile(r'href="/(?:product|listing)/\d+"|href="/f/[\w-]+/\d+"')


def _signed_in(client) -> bool:
    return "sign out" in client.get("/").get_data(as_text=True).lower()


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Referer": "http://evil.example/page"}])  # fmt: skip
def test_cross_site_posts_are_refused(app, headers: dict[str, str]) -> None:
    name = app.config["SITE_NAME"]
    client = app.test_client()
    refused = client.post("/login", data=ALEX, headers=headers)  # login CSRF: signing the victim in as someone
    assert refused.status_code == 403 and "cross-site" in refused.get_data(as_text=True).lower()
    assert not _signed_in(client)
    assert client.post("/login", data=ALEX, headers={"Origin": "http://localhost"}).status_code == 302  # same site
    assert _signed_in(client)
    path, form, check, mark = CHANGE[name]
    assert client.post(path, data=form, headers=headers).status_code == 403
    assert mark not in client.get(check).get_data(as_text=True)  # nothing changed
    assert client.post("/logout", headers=headers).status_code == 403 and _signed_in(client)


def test_a_session_saved_before_sign_out_is_dead_after_it(app) -> None:
    name = app.config["SITE_NAME"]
    cookie = app.config.get("SESSION_COOKIE_NAME", "session")
    client = app.test_client()
    assert client.post("/login", data=ALEX).status_code == 302
    assert client.get(PRIVATE[name]).status_code == 200
    saved = client.get_cookie(cookie).value
    assert client.post("/logout").status_code == 302
    client.set_cookie(cookie, saved)  # replay the cookie from before the sign-out
    response = client.get(PRIVATE[name])
    assert response.status_code == 302 and "/login" in response.headers["Location"]
    assert not _signed_in(client)
    other = app.test_client()  # signing in again elsewhere does not revive it
    assert other.post("/login", data=ALEX).status_code == 302 and other.get(PRIVATE[name]).status_code == 200
    client.set_cookie(cookie, saved)
    assert client.get(PRIVATE[name]).status_code == 302


@pytest.mark.parametrize("term", ["%", "_", "%%"])
def test_like_wildcards_in_search_are_plain_characters(app, term: str) -> None:
    _, search, _ = PAGES[app.config["SITE_NAME"]]
    client = app.test_client()
    text = client.get(search, query_string={"q": term}).get_data(as_text=True)
    assert ITEM_LINK.findall(text) == []  # no seeded row holds these characters; before, '%' and '_' matched all
    found = client.get(search, query_string={"q": FOUND[app.config["SITE_NAME"]]}).get_data(as_text=True)
    assert ITEM_LINK.findall(found)  # ordinary search still finds rows


def test_huge_form_fields_are_refused(app) -> None:
    client = app.test_client()
    assert client.post("/login", data=ALEX).status_code == 302
    huge = client.post("/login", data={"username": "x" * 2_000_000, "password": "y"})
    assert huge.status_code in (400, 413) and len(huge.get_data(as_text=True)) < 20_000
    field = client.post("/login", data={"username": "x" * 10_001, "password": "y"})
    assert field.status_code == 400 and "at most 10,000" in field.get_data(as_text=True)


def test_a_shopping_review_title_is_capped(tmp_path: Path) -> None:
    import sqlite3

    spec = get_site("shopping")
    path = tmp_path / "shop.db"
    spec.build_db(path, seed=0)
    client = spec.create_app(path).test_client()
    assert client.post("/login", data=ALEX).status_code == 302
    count = "SELECT COUNT(*), COALESCE(MAX(LENGTH(title)), 0) FROM reviews"
    before = sqlite3.connect(path).execute(count).fetchone()
    for title in ("x" * 2_000_000, "x" * 201):
        client.post("/product/1/reviews", data={"rating": "5", "title": title, "body": "fine"})
    long_body = client.post("/product/1/reviews", data={"rating": "5", "title": "ok", "body": "b" * 10_001},
                            follow_redirects=True)  # fmt: skip
    assert "at most" in long_body.get_data(as_text=True)
    assert sqlite3.connect(path).execute(count).fetchone() == before  # none of the three was stored
    ok = client.post("/product/1/reviews", data={"rating": "5", "title": "x" * 200, "body": "fine"},
                     follow_redirects=True)  # fmt: skip
    assert "Your review was posted" in ok.get_data(as_text=True)
