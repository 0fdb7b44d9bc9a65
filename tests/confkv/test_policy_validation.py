"""`--set` values are checked by range when the policy is built, with the allowed range in the message."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from confkv.policies import PRESETS, PolicyError, get_policy


@pytest.mark.parametrize("key, value, message", [
    ("alpha", "2", "alpha must be in [0.0, 1.0], got 2.0"),
    ("alpha", "nan", "alpha must be in [0.0, 1.0]"),
    ("ema_decay", "5", "ema_decay must be in [0.0, 1.0], got 5.0"),
    ("tau", "-0.1", "tau must be in [0.0, 1.0]"),
    ("protect", "-3", "protect must be >= 0, got -3"),
    ("sinks", "-1", "sinks must be >= 0, got -1"),
    ("pyramid_spread", "1", "pyramid_spread must be in [0.0, 1.0), got 1.0"),
    ("confidence_weights", "1,2", "confidence_weights must be 3 numbers >= 0"),
    ("confidence_weights", "1,-2,1", "confidence_weights must be 3 numbers >= 0"),
    ("confidence_weights", "0,0,0", "must not all be 0"),
])  # fmt: skip
def test_out_of_range_values_are_refused_with_the_range(key: str, value: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        get_policy("confkv", {key: value})
    assert message in str(info.value)


def test_n_low_above_n_high_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"n_low must be <= n_high, got n_low=1000 > n_high=100"):
        get_policy("confkv", {"n_low": "1000", "n_high": "100"})


def test_every_preset_and_sensible_overrides_still_validate() -> None:
    for name in PRESETS:
        get_policy(name)
    policy = get_policy("confkv", {"alpha": "1", "ema_decay": "0", "sinks": "0", "confidence_weights": "1,0,0"})
    assert policy.alpha == 1.0 and policy.confidence_weights == (1.0, 0.0, 0.0)


def test_the_cli_reports_the_range_before_anything_starts(tmp_path) -> None:
    db = tmp_path / "t.sqlite"
    result = CliRunner().invoke(app, ["run", "--set", "alpha=2", "--db", str(db)])
    assert result.exit_code == 2 and "alpha must be in [0.0, 1.0], got 2.0" in result.output
    assert not db.exists()
