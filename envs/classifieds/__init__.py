"""Classifieds site (VisualWebArena Classifieds-like): listings by category, search, messages, own listings."""

from envs.classifieds.app import create_app
from envs.classifieds.seed import build_db

__all__ = ["build_db", "create_app"]
