"""The cache against its oracles, for every policy on tiny random Llama, Qwen2 and GPT-2 models.

1. Budget >= sequence length: logits equal a plain full forward (nothing may change when nothing is evicted).
2. With eviction, INT8 off: every layer's physical length stays <= its budget after each call, and the logits equal
   one full forward pass whose per-layer, per-head mask hides exactly the evicted tokens (tests/confkv/oracle.py).
3. With INT8 on: the logits stay within a bound (see test_int8_error_bound).
"""

from __future__ import annotations

import pytest
import torch

from confkv import ConfKVCache, ConfKVSession, attach, get_policy
from confkv.policies import PRESETS
from confkv.testing import tiny_model
from tests.confkv.oracle import oracle_logits

ARCHS = ["llama", "qwen2", "gpt2"]
POLICIES = sorted(PRESETS)
SMALL = {"sinks": "2", "protect": "4", "prefill_chunk": "16", "slack": "0"}  # slack: exact budgets


def small_policy(name: str, budget: int, **extra: str) -> object:
    """A preset shrunk to tiny-model sizes (same ranker, gate and storage as the preset)."""
    over = dict(SMALL)
    preset = PRESETS[name]
    if preset.gated:
        over.update(n_low=str(budget), n_high=str(budget + 8), tau="0.3")
    elif name != "full":
        over["budget"] = str(budget)
    if preset.int8_after:
        over["int8_after"] = "4"
    if name == "h2o":
        over["protect"] = str(budget // 2)
    over.update(extra)
    return get_policy(name, over)


def run_session(model, ids: torch.Tensor, policy, prefill: int) -> tuple[ConfKVSession, torch.Tensor]:
    """Prefill `prefill` tokens, then feed the rest one by one; logits for every position after the prefill."""
    session = ConfKVSession(model, policy, record_evictions=True)
    logits = [session.append(ids[:, :prefill])]
    for t in range(prefill, ids.shape[1] - 1):
        logits.append(session.step(int(ids[0, t])))
        in_force = session.cache.layer_budgets or []  # decided from this step's logits, applied right after it
        for layer, budget in zip(session.cache.layers, in_force, strict=False):
            assert layer.physical_length <= budget + policy.slack, "physical length exceeds the layer budget + slack"
    return session, torch.stack(logits, dim=1)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", POLICIES)
def test_no_eviction_matches_full_forward(arch: str, name: str) -> None:
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(1))
    policy = small_policy(name, budget=128, int8_after="none")
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        full = model(ids).logits
    _, got = run_session(model, ids, policy, prefill=20)
    torch.testing.assert_close(got, full[:, 19:-1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", [n for n in POLICIES if n != "full"])
@pytest.mark.parametrize("slack", ["0", "5"])
def test_eviction_matches_masked_oracle(arch: str, name: str, slack: str) -> None:
    """With slack the layers run over budget by up to `slack` tokens between eviction passes (run_session checks
    the bound after every step); the oracle still sees exactly the tokens each forward saw."""
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (1, 72), generator=torch.Generator().manual_seed(2))
    budget = 16 if name in ("confkv-pyramid",) else 12
    policy = small_policy(name, budget=budget, int8_after="none", slack=slack)
    session, got = run_session(model, ids, policy, prefill=30)
    assert any(layer.evictions for layer in session.cache.layers), "the test must actually evict"
    want = oracle_logits(model, ids[:, :-1], session.cache)
    torch.testing.assert_close(got, want[:, 29:], atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_int8_error_bound(arch: str) -> None:
    """INT8 with per-token absmax scales rounds each element by at most scale/2 = absmax/254.

    For one attention call, logits q.k move by at most |q|_1 * max|k| / 254 * scaling, and the output by at most
    max|v| / 254 plus the softmax shift; through a few layers of a random tiny model this stays far below the
    spread of the logits. We assert: relative L2 error of the final logits < 2% (measured ~0.1-0.5%), and argmax
    agreement on >= 90% of positions, against the same eviction schedule in full precision (the oracle).
    """
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (1, 64), generator=torch.Generator().manual_seed(3))
    policy = get_policy("sliding", {**SMALL, "budget": "24", "int8_after": "6"})
    session, got = run_session(model, ids, policy, prefill=24)
    assert max(layer.q8.n for layer in session.cache.layers) > 0, "the test must store INT8 tokens"
    want = oracle_logits(model, ids[:, :-1], session.cache)[:, 23:]
    rel = (got - want).norm() / want.norm()
    assert rel < 0.02, f"relative logit error {rel:.4f}"
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    assert agree >= 0.9


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_with_cache_matches_plain_generate(arch: str) -> None:
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (1, 24), generator=torch.Generator().manual_seed(4))
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        plain = model.generate(ids, max_new_tokens=12, do_sample=False)
        cache = ConfKVCache(model, get_policy("full"))
        with attach(model, cache):
            ours = model.generate(ids, max_new_tokens=12, do_sample=False, cache=cache)
    assert torch.equal(plain, ours)


def test_generate_with_gated_policy_evicts_and_tracks_confidence() -> None:
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 30), generator=torch.Generator().manual_seed(5))
    cache = ConfKVCache(model, small_policy("confkv", budget=12))
    proc = cache.confidence_processor()
    with torch.no_grad(), attach(model, cache):
        out = model.generate(ids, max_new_tokens=20, do_sample=False, cache=cache, logits_processor=[proc])
    assert out.shape[1] == 50
    assert len(proc.history) == 20 and all(0.0 <= c <= 1.0 for c in proc.history)
    mem = cache.memory()
    assert max(mem.kept_tokens) <= 20 and mem.kv_bytes < mem.full_kv_bytes
    assert cache.peak_kv_bytes >= mem.kv_bytes


@pytest.mark.parametrize("name", ["full", "sliding", "h2o", "confkv", "confkv-turn"])
def test_an_unrecorded_chunk_confidence_computes_only_the_rows_a_gate_reads(name: str) -> None:
    """`chunk_confidence=False` (the forced replay) drops the LM head's confidence rows where no gate reads a
    forward's confidence, and changes nothing else: the same kept tokens, the same last logits."""
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(7))
    policy = small_policy(name, budget=12)
    rows: list[int] = []
    handle = model.lm_head.register_forward_hook(lambda _m, _a, out: rows.append(out.shape[1]))
    try:
        runs = {}
        for recorded in (True, False):
            session = ConfKVSession(model, policy)
            session.chunk_confidence = recorded
            rows.clear()
            last = session.append(ids)
            runs[recorded] = (list(rows), last, [layer.positions().clone() for layer in session.cache.layers])
    finally:
        handle.remove()
    assert runs[True][0] == [16, 16, 8]  # the chunk mean's rows (fewer than CONFIDENCE_POSITIONS here)
    assert runs[False][0] == ([16, 16, 8] if name == "confkv" else [1, 1, 1])  # only the forward gate reads them
    torch.testing.assert_close(runs[False][1], runs[True][1], rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(runs[False][2], runs[True][2], strict=True))


def test_chunked_prefill_bounds_the_peak() -> None:
    """A long append never materializes the whole input: peak <= (budget + chunk) tokens of KV."""
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 400), generator=torch.Generator().manual_seed(6))
    policy = get_policy("sliding", {**SMALL, "budget": "32", "prefill_chunk": "16"})
    session = ConfKVSession(model, policy)
    session.append(ids)
    per_token = session.cache.layers[0].full_bytes_per_token() * len(session.cache.layers)
    per_slot = sum(layer.fp.slot_bytes(tuple(layer.fp.bufs)) for layer in session.cache.layers)  # + pos, acc
    assert session.cache.peak_kv_bytes <= (32 + 16) * per_slot
    assert session.cache.full_kv_bytes() == 400 * per_token
    assert [layer.physical_length for layer in session.cache.layers] == [32] * len(session.cache.layers)


def test_pyramid_budgets_per_layer() -> None:
    model, vocab = tiny_model("llama", num_hidden_layers=4)
    policy = small_policy("confkv-pyramid", budget=24, int8_after="none")
    session, _ = run_session(model, torch.randint(0, vocab, (1, 80), generator=torch.Generator().manual_seed(7)),
                             policy, prefill=30)
    session.cache.set_budget(policy.n_low)  # the budget in force for the next step
    budgets = session.cache.layer_budgets
    session.step(3)
    assert budgets[0] > budgets[-1]
    assert sum(budgets) == policy.n_low * 4
    assert [layer.physical_length for layer in session.cache.layers] == budgets


def test_memory_is_really_freed_when_the_budget_drops() -> None:
    model, vocab = tiny_model("llama")
    session = ConfKVSession(model, get_policy("sliding", {**SMALL, "budget": "64"}))
    session.append(torch.randint(0, vocab, (1, 64)))
    before = session.cache.memory().alloc_bytes
    session.cache.set_budget(16)
    session.step(1)
    after = session.cache.memory()
    assert after.kept_tokens == [16] * len(session.cache.layers)
    assert after.alloc_bytes < before / 2


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_batch_of_two_unpadded_rows_evicts_per_row_and_matches_the_oracle(arch: str) -> None:
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (2, 48), generator=torch.Generator().manual_seed(8))
    cache = ConfKVCache(model, small_policy("confkv", budget=12, int8_after="none"), record_evictions=True)
    logits = []
    with torch.no_grad(), attach(model, cache):
        logits.append(model(ids[:, :20], cache=cache).logits[:, -1])
        for t in range(20, 48):
            logits.append(model(ids[:, t : t + 1], cache=cache).logits[:, -1])
    got = torch.stack(logits, dim=1)
    positions = [p for layer in cache.layers for p, _ in layer.evictions]
    assert positions and not torch.equal(positions[-1][0], positions[-1][1]), "rows should evict differently"
    want = oracle_logits(model, ids, cache)[:, 19:]
    torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-4)


def test_pinned_spans_are_never_evicted_and_sit_outside_the_budget() -> None:
    model, vocab = tiny_model("llama")
    session = ConfKVSession(model, get_policy("sliding", {**SMALL, "budget": "16"}), record_evictions=True)
    session.append(torch.randint(0, vocab, (1, 10)))
    session.cache.pin([(0, 10)])  # e.g. the agent's system prompt
    session.append(torch.randint(0, vocab, (1, 40)))
    turn = session.seen
    session.cache.pin([(0, 10), (turn, None)])  # plus the turn being decided
    session.append(torch.randint(0, vocab, (1, 24)))
    for _ in range(5):
        session.step(3)
    for layer in session.cache.layers:
        kept = set(layer.fp.view("pos")[0, 0].tolist())
        assert set(range(10)) <= kept and set(range(turn, session.seen)) <= kept
        assert layer.physical_length == 16 + 10 + (session.seen - turn)
    session.cache.pin([(0, 10)])  # the turn is over: its tokens compete for the budget again
    session.step(4)
    assert all(layer.physical_length == 16 + 10 for layer in session.cache.layers)
