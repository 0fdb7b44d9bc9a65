"""Turn a next-token distribution into one confidence number in [0, 1].

Conf-KV keeps more context when the model is unsure; this module is the "how unsure" part:
    c = w_e * (1 - H(p) / log V) + w_m * sigmoid(logp_1 - logp_2) + w_p * max p
All terms are computed in fp32 from the logits shifted by their maximum, so a 150k vocabulary and extreme logits
stay finite.

Note on the scale: with the paper's sigmoid margin, a uniform distribution does not score 0 but the floor
`w_m / 2 + w_p / V` (0.15 with default weights): the margin of two equal logits is sigmoid(0) = 0.5.
`rescale=True` maps that floor to 0 and a one-hot distribution to 1, which is easier to threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

DEFAULT_WEIGHTS: tuple[float, float, float] = (0.4, 0.3, 0.3)


def confidence(
    logits: torch.Tensor, weights: Sequence[float] = DEFAULT_WEIGHTS, rescale: bool = False
) -> torch.Tensor:
    """Confidence of each distribution in `logits[..., V]`; returns a float32 tensor of shape `logits.shape[:-1]`."""
    if logits.shape[-1] < 2:
        raise ValueError(f"confidence needs a vocabulary of at least 2 tokens, got {logits.shape[-1]}")
    w_e, w_m, w_p = (float(w) for w in weights)
    vocab = logits.shape[-1]
    if logits.device.type == "cpu" and not (logits.requires_grad and torch.is_grad_enabled()):
        from confkv.kernels import cpu_decode

        if cpu_decode.active():  # the same formula in two passes per row (cpu_confidence.cpp); this one is its oracle
            rows = logits.reshape(-1, vocab).float().contiguous()
            return cpu_decode.kernel().confidence_rows(rows, w_e, w_m, w_p, rescale).view(logits.shape[:-1])
    return reference_confidence(logits, (w_e, w_m, w_p), rescale)


def reference_confidence(logits: torch.Tensor, weights: Sequence[float], rescale: bool = False) -> torch.Tensor:
    """`confidence` in tensor ops (any device; the compiled CPU path is tested against it)."""
    w_e, w_m, w_p = (float(w) for w in weights)
    vocab = logits.shape[-1]
    # From z = x - max(x) alone: log p = z - log S with S = sum(exp z), so H = log S - sum(exp(z) z) / S, the top-2
    # log-prob margin is -z2 (z2 the runner-up) and max p = 1 / S. Why not log_softmax + topk: this runs once per
    # decode step and its cost is vocabulary passes; index-returning reductions (topk, max) cost ~20 cheap passes.
    x = logits.float()
    top1 = x.amax(dim=-1, keepdim=True)
    z = (x - top1).clamp_min_(-1e4)  # masked (-inf) logits: exp gives 0 either way, and 0 * z stays 0 (not nan)
    e = z.exp()
    s = e.sum(-1)
    entropy = s.log() - torch.linalg.vecdot(e, z) / s
    norm_entropy = (entropy / math.log(vocab)).clamp(0.0, 1.0)
    is_top = z == 0
    runner_up = torch.where(is_top, -1e4, z).amax(dim=-1)
    runner_up = torch.where(is_top.sum(-1) > 1, 0.0, runner_up)  # a tie for the top: margin 0
    c = w_e * (1.0 - norm_entropy) + w_m * torch.sigmoid(-runner_up) + w_p / s
    if rescale:
        floor = w_m * 0.5 + w_p / vocab
        top = w_e + w_m + w_p
        c = (c - floor) / (top - floor)
    return c.clamp(0.0, 1.0)


class ConfidenceLogitsProcessor:
    """A `transformers` logits processor that reports each step's confidence and leaves the scores untouched.

    `model.generate(..., logits_processor=[ConfidenceLogitsProcessor(history.append)])` reports the model's own
    confidence per generated step (an attached `ConfKVCache` computes its budget from each forward's logits itself,
    see `KVPolicy.confidence`). With a batch, the least confident row is reported.
    """

    def __init__(
        self, sink: Callable[[float], None], weights: Sequence[float] = DEFAULT_WEIGHTS, rescale: bool = False
    ) -> None:
        self.sink = sink
        self.weights = tuple(weights)
        self.rescale = rescale
        self.history: list[float] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        c = float(confidence(scores, self.weights, self.rescale).min())
        self.history.append(c)
        self.sink(c)
        return scores
