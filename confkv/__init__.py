"""confkv: confidence-gated KV-cache management for `transformers` models.

    from confkv import ConfKVCache, ConfKVSession, get_policy
"""

from confkv.cache import ConfKVCache
from confkv.confidence import ConfidenceLogitsProcessor, confidence
from confkv.policies import PRESETS, PolicyConfig, PolicyError, get_policy
from confkv.session import ConfKVSession

__all__ = [
    "PRESETS",
    "ConfKVCache",
    "ConfKVSession",
    "ConfidenceLogitsProcessor",
    "PolicyConfig",
    "PolicyError",
    "confidence",
    "get_policy",
]
