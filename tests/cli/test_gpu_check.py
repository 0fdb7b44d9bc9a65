"""`python -m cli.gpu_check --smoke` on CPU: every part of the GPU check runs end to end at tiny shapes and writes
its JSON and Markdown, so the script that first meets a GPU has run before (issue 39)."""

from __future__ import annotations

import json

from cli.gpu_check import main


def test_the_gpu_check_runs_every_part_at_tiny_shapes(tmp_path):
    assert main(["--smoke", "--device", "cpu", "--out", str(tmp_path), "--contexts", "600"]) == 0
    report = json.loads((tmp_path / "gpu_e2e.json").read_text())
    assert all(report[p]["ok"] for p in ("decode", "memory", "forced", "generate"))
    assert [r["variant"] for r in report["decode"]["rows"]] == ["plain", "full", "confkv"]
    assert report["memory"]["full_over_confkv"] > 1
    forced = report["forced"]
    assert forced["steps"] == 7 and forced["full"]["same_decisions_as_cpu"]
    assert forced["full"]["decisions"] != forced["sliding@32"]["decisions"]  # the small window decides otherwise
    assert forced["confkv@96"]["peak_kv_bytes"] < forced["full"]["peak_kv_bytes"]
    assert report["generate"]["full"]["agrees_with_plain_generate"] == 1.0
    text = (tmp_path / "gpu_e2e.md").read_text()
    assert "Every part ran." in text and "| 600 | confkv |" in text and "| full | True |" in text


def test_a_failing_part_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    import cli.gpu_check

    def broken(*args, **kwargs):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(cli.gpu_check, "part_decode", broken)
    assert main(["--smoke", "--device", "cpu", "--out", str(tmp_path), "--parts", "decode,generate"]) == 1
    report = json.loads((tmp_path / "gpu_e2e.json").read_text())
    assert report["decode"]["ok"] is False and "no such kernel" in report["decode"]["error"]
    assert report["generate"]["ok"] is True
    assert "Failed parts: decode" in (tmp_path / "gpu_e2e.md").read_text()
    # the script runs one part per process: a later run adds its part to the same report
    assert main(["--smoke", "--device", "cpu", "--out", str(tmp_path), "--parts", "memory"]) == 0
    report = json.loads((tmp_path / "gpu_e2e.json").read_text())
    assert report["memory"]["ok"] and report["generate"]["ok"] and report["decode"]["ok"] is False
    rows = report["memory"]["rows"]
    assert rows[1]["asked"] == rows[0]["generated"]  # confkv generates as many tokens as full did
