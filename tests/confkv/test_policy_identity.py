"""Stored identities: `KVPolicy.to_dict()` is stored as `policy_config` in trace DBs and hashed into run keys, so a
resumed eval finds the runs it interrupted only if every registered preset (and every override people have used)
serialises exactly as before. The literals below were recorded from the code before gates became plugins (commit
5c06c91) and must not be edited to make a change pass: a new key is allowed only by a new registered plugin, at its
default, which `traces.store` resumes through `KVPolicy.defaults()`.
"""

from __future__ import annotations

import pytest

from confkv.policies import get_policy, policy_names

# `confkv` as recorded; every case below is this with its own differences (key order included).
CONFKV = {'name': 'confkv', 'budget': None, 'gated': True, 'n_low': 256, 'n_high': 512, 'tau': 0.5,
          'tau_quantile': None, 'shrink': None, 'pyramid': False, 'pyramid_spread': 0.5,
          'confidence_weights': (0.4, 0.3, 0.3), 'confidence_rescale': False, 'chunk_confidence': 'mean',
          'ranker': 'ema', 'alpha': 0.5, 'ema_decay': 0.9, 'seed': 0, 'sinks': 4, 'protect': 64, 'int8_after': 64,
          'key_scales': 'channel', 'prefill_chunk': 512, 'slack': 32, 'cold': 0, 'recall_block': 16,
          'recall_rerun': True}  # fmt: skip

CASES = [
    ('full', {}, {'name': 'full', 'gated': False, 'int8_after': None}),
    ('sliding', {}, {'name': 'sliding', 'budget': 512, 'gated': False, 'ranker': 'recency', 'protect': 0, 'int8_after': None}),
    ('h2o', {}, {'name': 'h2o', 'budget': 512, 'gated': False, 'ranker': 'h2o', 'sinks': 0, 'protect': 256, 'int8_after': None}),
    ('confkv', {}, {}),
    ('confkv-paper', {}, {'name': 'confkv-paper'}),
    ('confkv-recall', {}, {'name': 'confkv-recall', 'cold': 2048}),
    ('confkv-pyramid', {}, {'name': 'confkv-pyramid', 'pyramid': True}),
    ('random', {}, {'name': 'random', 'ranker': 'random', 'int8_after': None}),
    ('recency', {}, {'name': 'recency', 'ranker': 'recency', 'int8_after': None}),
    ('attention', {}, {'name': 'attention', 'ranker': 'attention', 'int8_after': None}),
    ('confkv-fixed', {}, {'name': 'confkv-fixed', 'budget': 512, 'gated': False}),
    ('confkv-noint8', {}, {'name': 'confkv-noint8', 'int8_after': None}),
    ('confkv-turn', {}, {'name': 'confkv-turn', 'gated': 'turn', 'tau': 0.65}),  # added with the turn gate (issue 37)
    ('confkv-turn-recall', {}, {'name': 'confkv-turn-recall', 'gated': 'turn', 'tau': 0.65, 'cold': 2048}),
    # added with the turn gate matched on average (issue 37): 2/3 and 4/3 of the fixed budget
    ('confkv-turn-wide', {}, {'name': 'confkv-turn-wide', 'gated': 'turn', 'n_low': 341, 'n_high': 683, 'tau': 0.65}),
    # added with the byte-matchable baselines (issue 36): the fixed ones with confkv's INT8 storage
    ('sliding-int8', {}, {'name': 'sliding-int8', 'budget': 512, 'gated': False, 'ranker': 'recency', 'protect': 0}),
    ('h2o-int8', {}, {'name': 'h2o-int8', 'budget': 512, 'gated': False, 'ranker': 'h2o', 'sinks': 0, 'protect': 256}),
    ('random-int8', {}, {'name': 'random-int8', 'budget': 512, 'gated': False, 'ranker': 'random'}),
    ('confkv', {'tau': '0.6'}, {'tau': 0.6}),
    ('confkv', {'tau': 'auto:0.75'}, {'tau_quantile': 0.75}),
    ('confkv', {'tau': 'auto'}, {'tau_quantile': 0.2}),
    ('confkv', {'shrink': '16'}, {'shrink': 16}),
    ('confkv', {'n_low': '128'}, {'n_low': 128}),
    ('confkv', {'tau': 'auto:0.3', 'shrink': '8', 'pyramid': 'on'}, {'tau_quantile': 0.3, 'shrink': 8, 'pyramid': True}),
    ('confkv-fixed', {'n_low': '96', 'gated': 'false', 'budget': '300', 'slack': '0'}, {'name': 'confkv-fixed', 'budget': 300, 'gated': False, 'n_low': 96, 'slack': 0}),
    ('sliding', {'budget': '256'}, {'name': 'sliding', 'budget': 256, 'gated': False, 'ranker': 'recency', 'protect': 0, 'int8_after': None}),
    ('confkv-recall', {'tau': '0.6'}, {'name': 'confkv-recall', 'tau': 0.6, 'cold': 2048}),
    ('confkv', {'chunk_confidence': 'last', 'confidence_weights': '1,0,0'}, {'confidence_weights': (1.0, 0.0, 0.0), 'chunk_confidence': 'last'}),
    ('h2o', {'budget': '128', 'protect': '64'}, {'name': 'h2o', 'budget': 128, 'gated': False, 'ranker': 'h2o', 'sinks': 0, 'int8_after': None}),
    ('confkv', {'gated': 'false', 'budget': '400'}, {'budget': 400, 'gated': False}),
    ('confkv', {'ranker': 'h2o', 'alpha': '0.3'}, {'ranker': 'h2o', 'alpha': 0.3}),
    ('full', {'gated': 'true'}, {'name': 'full', 'int8_after': None}),
]  # fmt: skip

# The budget schedule each builds (its class and parameters: what the cache actually runs).
SCHEDULES = [
    ('full', {}, 'None'),
    ('sliding', {}, 'FixedBudget(n=512)'),
    ('confkv', {}, 'GatedBudget(n_low=256, n_high=512, tau=0.5)'),
    ('confkv-fixed', {}, 'FixedBudget(n=512)'),
    ('confkv', {'tau': '0.6'}, 'GatedBudget(n_low=256, n_high=512, tau=0.6)'),
    ('confkv', {'tau': 'auto:0.75'}, 'QuantileGate(n_low=256, n_high=512, q=0.75, warmup=16, window=1024)'),
    ('confkv', {'shrink': '16'}, 'Hysteresis(inner=GatedBudget(n_low=256, n_high=512, tau=0.5), shrink=16, last=None)'),
    ('confkv', {'tau': 'auto:0.3', 'shrink': '8', 'pyramid': 'on'}, 'Hysteresis(inner=QuantileGate(n_low=256, n_high=512, q=0.3, warmup=16, window=1024), shrink=8, last=None)'),
    ('confkv-fixed', {'n_low': '96', 'gated': 'false', 'budget': '300', 'slack': '0'}, 'FixedBudget(n=300)'),
    ('full', {'gated': 'true'}, 'GatedBudget(n_low=256, n_high=512, tau=0.5)'),
    ('confkv-turn', {}, 'TurnBudget(n_low=256, n_high=512, tau=0.65, current=512)'),
]  # fmt: skip


def test_every_registered_policy_has_a_recorded_identity() -> None:
    assert {name for name, over, _diff in CASES if not over} == set(policy_names())


@pytest.mark.parametrize("name, overrides, diff", CASES)
def test_to_dict_is_byte_identical_to_the_recorded_one(name: str, overrides: dict, diff: dict) -> None:
    # repr, not ==: key order, int vs float, tuple vs list and True vs 1 all count
    assert repr(get_policy(name, overrides).to_dict()) == repr({**CONFKV, **diff})


@pytest.mark.parametrize("name, overrides, schedule", SCHEDULES)
def test_the_same_settings_build_the_same_schedule(name: str, overrides: dict, schedule: str) -> None:
    assert repr(get_policy(name, overrides).schedule()) == schedule
