"""Forum site (Postmill/Reddit-like): subforums, threads, nested comments, votes, profiles and search."""

from envs.forum.app import create_app
from envs.forum.seed import build_db

__all__ = ["build_db", "create_app"]
