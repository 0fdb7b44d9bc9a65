"""All three sites answer hostile-but-fair inputs with 400 and a message (never 500), through one shared guard
(`envs.webapp.install_input_guard`); each site's session secret is random per instance, so a cookie forged with
the old hard-coded key signs nobody in."""

from __future__ import annotations

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
