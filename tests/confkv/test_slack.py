"""Amortised eviction (`slack`): the budget bound with slack, batched INT8 migration, host-side pin counts, and
the decode benchmark's prefill figure."""

from __future__ import annotations

import torch

from confkv import ConfKVSession, get_policy
from confkv.bench.decode import prefill_ratios, run_decode_bench
from confkv.policy import covered
from confkv.testing import tiny_model
from tests.confkv.test_cache import SMALL


def test_slack_lets_a_layer_run_over_then_evicts_back_to_the_budget_in_one_pass() -> None:
    model, vocab = tiny_model("llama")
    policy = get_policy("sliding", {**SMALL, "budget": "16", "slack": "5"})
    session = ConfKVSession(model, policy)
    session.append(torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(1)))
    assert [layer.physical_length for layer in session.cache.layers] == [16, 16]  # a pass ends at the budget
    lengths = []
    for t in range(14):
        session.step(3 + t)
        lengths.append(session.cache.layers[0].physical_length)
    assert lengths == [17, 18, 19, 20, 21, 16, 17, 18, 19, 20, 21, 16, 17, 18]
    kept = session.cache.layers[0].fp.view("pos")[0, 0].sort().values.tolist()
    assert kept == [0, 1, *range(session.seen - 16, session.seen)]  # sinks + the newest (the pass is 2 steps ago)


def test_int8_migrates_in_batches_and_the_window_stays_within_int8_after_plus_slack() -> None:
    model, vocab = tiny_model("qwen2")
    policy = get_policy("sliding", {**SMALL, "budget": "24", "int8_after": "6", "slack": "4"})
    session = ConfKVSession(model, policy)
    session.append(torch.randint(0, vocab, (1, 30), generator=torch.Generator().manual_seed(2)))
    fp_sizes = []
    for t in range(12):
        session.step(5 + t)
        layer = session.cache.layers[0]
        fp_sizes.append(layer.fp.n)
        assert layer.physical_length <= 24 + 4
        assert sorted(layer.fp.view("pos")[0, 0].tolist()) == list(range(session.seen - layer.fp.n, session.seen))
    assert max(fp_sizes) == 6 + 4 and min(fp_sizes) == 6  # grows to window + slack, migrates back to the window
    assert session.cache.layers[0].q8.n > 0


def test_pinned_count_is_kept_on_the_host_and_agrees_with_the_device() -> None:
    model, vocab = tiny_model("llama")
    session = ConfKVSession(model, get_policy("sliding", {**SMALL, "budget": "16", "slack": "3"}))
    session.cache.pin([(0, 10), (5, 12)])  # overlapping spans count once
    session.append(torch.randint(0, vocab, (1, 40)))
    session.cache.add_pin(session.seen, None)
    for _ in range(9):
        session.step(3)
    for layer in session.cache.layers:
        pos = layer.fp.view("pos")[0, 0].tolist()
        want = sum(1 for p in pos if p < 12 or p >= 40)
        assert layer.pin_state[1] == want == 12 + 9
        assert layer.physical_length - want <= 16 + 3
    assert covered([(0, 10), (5, 12), (20, None)], 8, 25) == 4 + 5


def test_decode_bench_reports_prefill_throughput_for_full_and_confkv() -> None:
    model, vocab = tiny_model("llama")
    report = run_decode_bench(model, vocab, [48], steps=3, repeats=1,
                              confkv_overrides={**SMALL, "n_low": "12", "n_high": "20", "int8_after": "6"})
    rows = {r["variant"]: r for r in report["rows"]}
    assert rows["plain"]["prefill_tokens_per_s"] is None
    assert rows["full"]["prefill_tokens_per_s"] > 0 and rows["confkv"]["prefill_tokens_per_s"] > 0
    assert rows["confkv"]["kept_tokens"] <= 20 < rows["full"]["kept_tokens"]
    assert set(prefill_ratios(report)) == {48}
