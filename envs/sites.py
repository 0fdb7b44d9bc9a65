"""Registry of the self-hosted sites: name -> URL placeholder and package.

Site packages are imported lazily, so that a missing or broken site only fails when somebody asks for it, with a
message that names the site instead of an ImportError deep inside the server.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import flask


@dataclass(frozen=True)
class SiteSpec:
    """Where a site lives: `package` holds `app.create_app(db_path)` and `seed.build_db(db_path, seed)`."""

    name: str
    placeholder: str
    package: str
    canonical_port: int  # WebArena's port for the site's kind: where a replay shows the site, whatever port it runs on

    @property
    def canonical_origin(self) -> str:
        return f"http://127.0.0.1:{self.canonical_port}"

    def _module(self, part: str) -> ModuleType:
        try:
            return importlib.import_module(f"{self.package}.{part}")
        except ModuleNotFoundError as exc:
            if exc.name and (exc.name == self.package or exc.name.startswith(f"{self.package}.")):
                raise SiteUnavailableError(f"site '{self.name}' is not available: module {exc.name} is missing") from exc
            raise

    @property
    def create_app(self) -> Callable[[Path], flask.Flask]:
        return self._module("app").create_app

    @property
    def build_db(self) -> Callable[..., None]:
        return self._module("seed").build_db

    def source_hash(self) -> str:
        """Hash of every .py file in the site package: any edit (seed code or word lists) rebuilds cached DBs."""
        package_dir = Path(self._module("seed").__file__).parent
        digest = hashlib.sha256()
        for path in sorted(package_dir.rglob("*.py")):
            digest.update(path.relative_to(package_dir).as_posix().encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


class SiteUnavailableError(RuntimeError):
    """A site name is unknown or its package cannot be imported."""


SITES: dict[str, SiteSpec] = {
    "shopping": SiteSpec("shopping", "__SHOPPING__", "envs.shopping", 7770),
    "classifieds": SiteSpec("classifieds", "__CLASSIFIEDS__", "envs.classifieds", 9980),
    "forum": SiteSpec("forum", "__FORUM__", "envs.forum", 9999),
}


def get_site(name: str) -> SiteSpec:
    """The spec for `name`, or a clear error listing the known sites."""
    try:
        return SITES[name]
    except KeyError:
        raise SiteUnavailableError(f"unknown site '{name}'; known sites: {', '.join(SITES)}") from None
