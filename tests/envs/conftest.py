"""Fixtures shared by the site tests (test_shopping.py, test_classifieds.py, test_forum.py).

Each of those modules drives one self-hosted site through Flask's test client and used to repeat the same setup:
seed once per module, give every test a private copy of the DB (state-changing tests must not leak into each
other), an app + client over that copy, and a client signed in as the task account `alex`. A module picks its site
by setting `SITE = "<name>"` (a key of `envs.sites.SITES`); the fixtures below read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sites import SiteSpec, get_site

ALEX_LOGIN = {"username": "alex", "password": "confkv"}  # the account every site's seed creates for the tasks


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest) -> SiteSpec:
    """The site named by the test module's `SITE` constant."""
    name = getattr(request.module, "SITE", None)
    if not isinstance(name, str):
        pytest.fail(f"{request.module.__name__} uses the site fixtures but sets no SITE = '<site name>' constant")
    return get_site(name)


@pytest.fixture(scope="module")
def seeded(site: SiteSpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's database for seed 0, built once per module (seeding takes seconds); tests must not modify it."""
    path = tmp_path_factory.mktemp(f"{site.name}_seed") / "seed0.db"
    site.build_db(path, seed=0)
    return path


@pytest.fixture
def db_path(seeded: Path, tmp_path: Path) -> Path:
    """A private copy per test, so state changes in one test never leak into another."""
    path = tmp_path / "site.db"
    path.write_bytes(seeded.read_bytes())
    return path


@pytest.fixture
def client(site: SiteSpec, db_path: Path):
    """An anonymous visitor: Flask's test client for a fresh app over `db_path`."""
    return site.create_app(db_path).test_client()


@pytest.fixture
def alex(client):
    """The same client after signing in as `alex` (the login must answer with a redirect)."""
    response = client.post("/login", data=ALEX_LOGIN)
    assert response.status_code == 302
    return client
