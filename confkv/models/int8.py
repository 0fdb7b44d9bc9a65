"""Dynamic INT8 Linear layers: the CPU speed-up for machines without native bf16.

On an AVX2-only CPU, emulated bf16 is slower than fp32, while int8 weights with fp32 activations (fbgemm) ran the
1.5B model's prefill 2.4x and its decode 2.75x faster than fp32 (`docs/results/`, README). The LM head stays fp32 so
the logits that confidence is computed from keep their precision; the KV cache is untouched (it is the activations'
dtype, fp32).
"""

from __future__ import annotations

from typing import Any


def int8_linears(model: Any) -> Any:
    """Dynamic INT8 quantization of every Linear but the LM head (CPU only): int8 weights, fp32 activations."""
    import torch

    head = model.get_output_embeddings()
    skip = {name for name, module in model.named_modules() if module is head}
    spec = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name not in skip}
    return torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8)
