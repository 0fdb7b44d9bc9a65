"""PNG reports: the three plots are written, non-empty and real PNG images."""

from __future__ import annotations

import pytest
from matplotlib.image import imread

from traces.report import write_report
from traces.store import TraceStore

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_writes_all_plots(populated, tmp_path):
    out = tmp_path / "report"
    with TraceStore.open_existing(populated["path"]) as store:
        paths = write_report(store, out)
    names = sorted(p.name for p in paths)
    last_full, last_conf = populated["episodes"][("full", "forum-1")], populated["episodes"][("confkv", "forum-1")]
    assert names == sorted(
        [
            f"confidence_budget_episode_{last_full}.png",
            f"confidence_budget_episode_{last_conf}.png",
            "kv_bytes_by_policy.png",
            "success_vs_peak_memory.png",
        ]
    )
    for path in paths:
        assert path.parent == out and path.read_bytes()[:8] == PNG_MAGIC
        image = imread(path)
        assert image.shape[0] > 200 and image.shape[1] > 400
        assert image.std() > 0.01  # something was drawn, not a blank canvas


def test_report_on_chosen_episode_and_on_empty_database(populated, tmp_path):
    ep = populated["episodes"][("confkv", "shop-2")]
    with TraceStore.open_existing(populated["path"]) as store:
        paths = write_report(store, tmp_path / "one", episode_ids=[ep], run_ids=[populated["runs"]["confkv"]])
    assert {p.name for p in paths} == {
        f"confidence_budget_episode_{ep}.png",
        "kv_bytes_by_policy.png",
        "success_vs_peak_memory.png",
    }
    with TraceStore(tmp_path / "empty.sqlite") as empty:
        assert write_report(empty, tmp_path / "none") == []
        bare = empty.start_episode(empty.start_run("m", "full"), "t")
        empty.finish_episode(bare, success=True)
        with pytest.raises(ValueError, match="no decode tokens"):
            write_report(empty, tmp_path / "none", episode_ids=[bare])
