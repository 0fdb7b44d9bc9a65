"""Where the local cache lives. Its own module because everything that caches (converted models, precision timings
and acceptance records, GGUFs for the CPU peer) needs it, and the loader imports most of those."""

from __future__ import annotations

import os
from pathlib import Path


def confkv_home() -> Path:
    """Root of the local cache: ``$CONFKV_HOME`` or ``~/.cache/confkv-agent``."""
    return Path(os.environ.get("CONFKV_HOME") or Path.home() / ".cache" / "confkv-agent").expanduser()
