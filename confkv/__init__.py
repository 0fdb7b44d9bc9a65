"""confkv: confidence-gated KV-cache management for `transformers` models.

    from confkv import ConfKVCache, ConfKVSession, attach, get_policy
"""

from confkv.cache import ConfKVCache, attach
from confkv.confidence import ConfidenceLogitsProcessor, confidence
from confkv.policies import PRESETS, get_policy
from confkv.policy import KVPolicy, PolicyError
from confkv.session import ConfKVSession

__all__ = [
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
