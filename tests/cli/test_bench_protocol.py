"""A new benchmark is one file plus one registry line: the test writes both and drives the generated command."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from cli import bench as cli_bench
from cli.main import app

TOY = '''
from dataclasses import dataclass

from confkv.bench.protocol import Benchmark, option


@dataclass
class ToyOptions:
    model: str = option("toy-model", "what the report is named after")
    size: int = option(3, "items", low=1, high=10)
    mode: str = option("sum", "how to combine them", choices=("sum", "max"))
    scale: float = option(1.0, "factor", low=0.0, open_low=True)


def run(opts, progress):
    progress(f"toy: {opts.size} items")
    values = [opts.scale * i for i in range(1, opts.size + 1)]
    return {"model": opts.model, "size": opts.size, "value": sum(values) if opts.mode == "sum" else max(values)}


def plot(report, path):
    path.write_text(f"plot of {report['value']}")


BENCHMARK = Benchmark("toy", ToyOptions, run, lambda r: [f"toy {r['size']}: {r['value']}"], plots={"toy": plot},
                      out=None, help="Adds up a few numbers.")
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_bench.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli_bench.BENCHMARKS, "toy", "toy_bench")  # the one registry line
    yield tmp_path
    sys.modules.pop("toy_bench", None)


def test_a_registered_file_becomes_a_command_with_its_options(toy):
    runner = CliRunner()
    listing = runner.invoke(app, ["bench", "--help"])
    assert listing.exit_code == 0 and "toy" in listing.stdout and "Adds up a few numbers." in listing.stdout
    assert "toy_bench" not in sys.modules  # the listing reads the help from the source, importing nothing
    helped = runner.invoke(app, ["bench", "toy", "--help"], env={"COLUMNS": "200"})
    for flag in ("--size", "--mode", "--scale", "--model", "--json", "--out", "--png"):
        assert flag in helped.stdout, helped.stdout

    shown = runner.invoke(app, ["bench", "toy", "--size", "4", "--mode", "max"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == ["toy 4: 4.0"]  # out=None: nothing written, no path printed
    assert "toy: 4 items" in shown.stderr
    as_json = runner.invoke(app, ["bench", "toy", "--size", "4", "--scale", "0.5", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == {"model": "toy-model", "size": 4, "value": 5.0}


@pytest.mark.parametrize(("args", "flag"), [(["--size", "11"], "--size"), (["--size", "0"], "--size"),
                                            (["--mode", "mean"], "--mode"), (["--scale", "0"], "--scale")])
def test_the_declared_ranges_and_choices_are_enforced(toy, args, flag):
    result = CliRunner().invoke(app, ["bench", "toy", *args])
    assert result.exit_code == 2 and flag in result.output and "toy:" not in result.output, result.output


def test_out_writes_the_report_and_the_plot_by_one_rule(toy):
    runner = CliRunner()
    out = toy / "results"
    result = runner.invoke(app, ["bench", "toy", "--size", "2", "--model", "org/My Model", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report, png = out / "toy-My_Model.json", out / "toy-My_Model.png"
    assert json.loads(report.read_text()) == {"model": "org/My Model", "size": 2, "value": 3.0}
    assert png.read_text() == "plot of 3.0"
    assert result.stdout.splitlines() == ["toy 2: 3.0", f"results: {report}", f"results: {png}"]
    png.unlink()
    again = runner.invoke(app, ["bench", "toy", "--out", str(out), "--no-png", "--json"])
    assert again.exit_code == 0 and not png.exists()
    assert json.loads((out / "toy-toy-model.json").read_text())["value"] == 6.0


def test_every_registered_benchmark_loads_under_its_name_with_distinct_flags():
    from confkv.bench.protocol import RESERVED, options

    for name in cli_bench.BENCHMARKS:
        spec = cli_bench.load_benchmark(name)
        flags = [o.flag for o in options(spec.config)]
        assert len(flags) == len(set(flags)) and not {f.lstrip("-") for f in flags} & {"json", "png", *RESERVED}
        assert spec.help and cli_bench.summary(name) == spec.help  # what `bench --help` lists is the command's help
