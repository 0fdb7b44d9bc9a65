"""confkv: confidence-gated KV-cache management for `transformers` models.

    from confkv import ConfKVCache, ConfKVSession, attach, get_policy

The names below load on first use (PEP 562), so a light submodule (`confkv.cpu`, `confkv.bench.stats`) imported by
the trace store or a light CLI command does not pull in torch and transformers (~3 s) with it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confkv.cache import ConfKVCache, attach
    from confkv.confidence import ConfidenceLogitsProcessor, confidence
    from confkv.policies import PRESETS, get_policy
    from confkv.policy import KVPolicy, PolicyError
    from confkv.session import ConfKVSession

_HOMES = {
    "PRESETS": "confkv.policies",
    "ConfKVCache": "confkv.cache",
    "ConfKVSession": "confkv.session",
    "ConfidenceLogitsProcessor": "confkv.confidence",
    "KVPolicy": "confkv.policy",
    "PolicyError": "confkv.policy",
    "attach": "confkv.cache",
    "confidence": "confkv.confidence",
    "get_policy": "confkv.policies",
}
__all__ = [  # a literal, so linters and type checkers read the exports (`_HOMES` says where each lives)
    "PRESETS",
    "ConfKVCache",
    "ConfKVSession",
    "ConfidenceLogitsProcessor",
    "KVPolicy",
    "PolicyError",
    "attach",
    "confidence",
    "get_policy",
]


class _Package(types.ModuleType):
    """The package's module type: an export that shares its name with a submodule (`confidence`, the function, and
    `confkv.confidence`) would be replaced by the module when the submodule is imported, since the import sets the
    package attribute; this keeps the export there, as the eager imports did."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'confkv' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
