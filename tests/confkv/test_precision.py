"""Precisions: INT8 forms stay close to the float Linear per row, the model keeps its LM head, and `auto` picks the
fastest allowed precision from timings (injected here; `measure` is the only part that reads the clock)."""

from __future__ import annotations

import json

import pytest
import torch

from confkv.models.dtype import DtypeError, resolve_precision
from confkv.models.precision import PRECISIONS, Int8Linear, apply_precision, get_precision
from confkv.models.precision_choice import Shapes, acceptance, allowed, cache_path, cached_timings, choose

INT8_FORMS = [p for name, p in PRECISIONS.items() if not p.is_float and name == p.name]


def _linear(seed: int = 0, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(seed)
    lin = torch.nn.Linear(96, 80, bias=bias)
    with torch.no_grad():
        lin.weight[7] *= 40.0  # one output channel with outlier weights: a per-tensor scale would crush the rest
    return lin


@pytest.mark.parametrize("precision", INT8_FORMS, ids=lambda p: p.name)
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_int8_forms_stay_close_to_the_float_linear_on_every_channel(precision, phase):
    lin = _linear().to(precision.dtype)
    x = torch.randn(24, 96).to(precision.dtype)
    x[:, 5] *= 8.0  # and an outlier activation channel (per-token scales: it costs every channel a little)
    ref = lin(x).float()
    mod = Int8Linear(lin, precision)
    # prefill: one call on 24 rows; decode: 24 calls of one row each (each its own decode-form product)
    out = mod(x[None])[0] if phase == "prefill" else torch.cat([mod(x[i : i + 1]) for i in range(24)])
    assert out.dtype == precision.dtype and out.shape == ref.shape
    # per output channel over the rows: the outlier row must not cost the other rows their precision
    err = (out.detach().float() - ref).norm(dim=0) / ref.norm(dim=0)
    assert float(err.max()) < 0.06, (precision.name, phase, err.max())


def test_per_channel_weights_beat_one_scale_for_the_whole_tensor():
    lin = _linear(bias=False)
    x = torch.randn(16, 96)
    w = lin.weight.detach()
    per_tensor = torch.round(w / (w.abs().max() / 127)) * (w.abs().max() / 127)
    ref = lin(x)
    ours = Int8Linear(lin, get_precision("fp32-w8a8-float"))(x)
    assert (ours - ref).norm() < 0.5 * (x @ per_tensor.t() - ref).norm()


def test_phases_pick_their_own_form():
    lin = _linear()
    mod = Int8Linear(lin, get_precision("fp32-float-w8a8"))
    many, one = torch.randn(5, 96), torch.randn(1, 96)
    assert torch.equal(mod(many), lin(many))  # prefill rows: the float weight, exactly
    assert not torch.equal(mod(one), lin(one)) and torch.allclose(mod(one), lin(one), rtol=0.05, atol=0.05)
    both = Int8Linear(lin, get_precision("fp32-w8a8-float"))
    assert torch.equal(both(one), lin(one)) and not torch.equal(both(many), lin(many))


def test_apply_precision_swaps_every_linear_but_the_lm_head_and_keeps_logits_close():
    from confkv.session import ConfKVSession
    from confkv.testing import tiny_model

    ref, _ = tiny_model("qwen2")
    ids = list(range(3, 40))
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0, -1]
    for name in ("int8", "bf16-w8a8-int8wo", "bf16-float-int8wo"):
        p = get_precision(name)
        model, _ = tiny_model("qwen2")
        model = model.to(p.dtype)
        swapped = apply_precision(model, p)
        linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
        assert linears == [model.get_output_embeddings()] and swapped == 2 * 7  # 2 layers x q k v o gate up down
        with torch.no_grad():
            got = model(torch.tensor([ids])).logits[0, -1].float()
        assert torch.nn.functional.cosine_similarity(got, want, dim=0) > 0.99, name
        session = ConfKVSession(model, "full")  # a prefill chunk and decode rows through the same layers
        with torch.no_grad():
            session.append(ids)
            assert len(session.decode(4)) == 4


SHAPES = Shapes(((64, 64), (64, 16), (64, 16), (64, 64), (64, 256), (64, 256), (256, 64)), layers=2)
TIMINGS = {  # ms per layer, as `measure` writes them
    "fp32/prefill/float": 400.0, "fp32/prefill/w8a8": 100.0, "fp32/decode/float": 23.0, "fp32/decode/w8a8": 7.0,
    "bf16/prefill/float": 80.0, "bf16/prefill/w8a8": 120.0, "bf16/decode/float": 26.0, "bf16/decode/int8wo": 15.0,
    "bf16/decode/w8a8": 7.5, "fp32/prefill/bf16": 95.0, "fp32/decode/bf16": 21.0, "fp32/decode/int8wo": 10.0,
    "fp32/prefill/w8a8d": 130.0, "bf16/prefill/w8a8d": 140.0, "row/mv": 2.7, "row/linear": 2.1,
}  # fmt: skip


def test_auto_chooses_the_fastest_allowed_precision_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFKV_HOME", str(tmp_path))
    no_records = allowed(None)
    choice = choose(TIMINGS, SHAPES, no_records, "injected")
    assert choice.precision.name == "fp32"  # nothing but the reference without a decision-agreement record
    assert "no decision-agreement record" in "\n".join(choice.lines) and "injected" in choice.lines[0]
    every = {name: "ok" for name in PRECISIONS}
    assert choose(TIMINGS, SHAPES, every, "injected").precision.name == "bf16-float-w8a8"  # per phase: bf16 + w8a8
    slow_bf16 = {**TIMINGS, "bf16/prefill/float": 900.0, "bf16/prefill/w8a8": 900.0, "fp32/prefill/bf16": 900.0}
    assert choose(slow_bf16, SHAPES, every, "x").precision.name == "fp32-w8a8-w8a8"  # another machine, another pick
    fp32_residual = {n: "ok" if n.startswith("fp32") else "not: rejected" for n in PRECISIONS}
    assert choose(TIMINGS, SHAPES, fp32_residual, "x").precision.name == "fp32-bf16-w8a8"  # bf16 units, fp32 stream
    lines = "\n".join(choose(TIMINGS, SHAPES, every, "x").lines)
    assert "-> bf16-float-w8a8" in lines and "fp32/prefill/float=400.0" in lines


def test_weights_that_do_not_fit_are_not_chosen():
    every = {name: "ok" for name in PRECISIONS}
    bytes_two_copies = get_precision("bf16-float-w8a8").weight_bytes_per_param() * SHAPES.params
    choice = choose(TIMINGS, SHAPES, every, "x", available_bytes=int(bytes_two_copies))  # 60% of it is too little
    assert choice.precision.name != "bf16-float-w8a8" and "exceed" in "\n".join(choice.lines)


def test_acceptance_records_gate_every_precision_but_the_reference(tmp_path, monkeypatch):
    from confkv.models.precision_choice import verdict

    monkeypatch.setenv("CONFKV_HOME", str(tmp_path / "home"))
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps({"m": {"precisions": {"bf16-float-w8a8": {"agreement": 0.99, "states": 100},
                                                     "int8": {"agreement": 0.9, "states": 100}}}}))  # fmt: skip
    assert set(acceptance("m", path)) == {"bf16-float-w8a8", "fp32-w8a8-w8a8"}
    reasons = allowed("m", path)
    assert not reasons["bf16-float-w8a8"].startswith("not") and reasons["fp32-w8a8-w8a8"].startswith("not")
    assert reasons["fp32"] == "the reference" and reasons["bf16"].startswith("not: no decision-agreement record")
    assert allowed("other", path)["bf16-float-w8a8"].startswith("not")
    assert choose(TIMINGS, SHAPES, reasons, "x").precision.name == "bf16-float-w8a8"
    # a partial replay: pending while 97% is still reachable, rejected once it is not, never accepted early
    assert verdict({"agreement": 1.0, "states": 60, "planned": 144}) == (False, verdict(
        {"agreement": 1.0, "states": 60, "planned": 144})[1]) and "pending" in verdict(
        {"agreement": 1.0, "states": 60, "planned": 144})[1]  # fmt: skip
    rejected = verdict({"agreement": 0.9, "states": 60, "planned": 144})
    assert rejected[0] is False and "at most 95.8% reachable" in rejected[1]
    assert verdict({"agreement": 0.975, "states": 144, "planned": 144})[0] is True
    # this machine's records (bench decisions --record) overlay the shipped ones
    (tmp_path / "home" / "precision").mkdir(parents=True)
    (tmp_path / "home" / "precision" / "acceptance.json").write_text(
        json.dumps({"m": {"precisions": {"int8": {"agreement": 0.98, "states": 100}}}}))
    assert not allowed("m", path)["fp32-w8a8-w8a8"].startswith("not")


def test_timings_are_measured_once_per_machine_and_cached(tmp_path, monkeypatch):
    import confkv.models.precision_choice as pc

    monkeypatch.setenv("CONFKV_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(pc, "measure", lambda shapes, **kw: calls.append(shapes) or dict(TIMINGS))
    first, how = cached_timings(SHAPES)
    again, how_again = cached_timings(SHAPES)
    assert first == again == TIMINGS and len(calls) == 1
    assert "measured now" in how and "cached" in how_again and str(tmp_path) in how_again


def test_measure_times_every_form_a_precision_uses():
    from confkv.models.precision_choice import measure

    timings = measure(Shapes(((32, 32), (32, 64), (64, 32)), layers=1), reps=1)
    wanted = {f"{p.act}/prefill/{p.prefill}" for p in PRECISIONS.values() if p.act != "fp16"}
    wanted |= {f"{p.act}/decode/{p.decode}" for p in PRECISIONS.values() if p.act != "fp16"}
    assert set(timings) == wanted | {"row/mv", "row/linear"} and all(t > 0 for t in timings.values())


def test_resolve_precision_names_and_auto():
    from confkv.testing import tiny_config

    assert resolve_precision("bf16")[0].dtype == torch.bfloat16 and resolve_precision(None)[0].name == "fp32"
    assert resolve_precision("int8")[0].name == "fp32-w8a8-w8a8"
    with pytest.raises(DtypeError, match="expected one of auto, fp32"):
        resolve_precision("int4")
    assert resolve_precision("auto", "cpu")[0].name == "fp32"  # no shapes to time: stays exact, says so
    import confkv.models.precision_choice as pc

    original = pc.cached_timings
    try:
        pc.cached_timings = lambda shapes, progress=None: (dict(TIMINGS), "injected")
        pc_allowed = pc.allowed
        pc.allowed = lambda name: {n: "ok" for n in PRECISIONS}
        precision, lines = resolve_precision("auto", "cpu", config=tiny_config("qwen2"))
    finally:
        pc.cached_timings, pc.allowed = original, pc_allowed
    assert precision.name == "bf16-float-w8a8" and lines[0].startswith("precision auto: injected")


def test_layer_errors_rank_each_linear_by_its_int8_error():
    from confkv.models.precision import layer_errors
    from confkv.testing import tiny_model

    model, _ = tiny_model("qwen2")
    with torch.no_grad():  # an outlier input channel for one layer's down_proj: its W8A8 error must stand out
        model.model.layers[1].mlp.up_proj.weight[3, :] *= 50.0
    ids = torch.tensor([list(range(3, 60))])
    rows = layer_errors(model, ids, "fp32-w8a8-w8a8")
    assert len(rows) == 2 * 7 * 2 and [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
    assert rows[0][0] == "model.layers.1.mlp.down_proj"
    only_decode = layer_errors(model, ids, "bf16-float-int8wo")
    assert {r[1] for r in only_decode} == {"decode"} and len(only_decode) == 14


def test_w8a8d_keeps_the_down_projection_in_bf16_and_quantizes_the_rest():
    """The down projection reads SiLU(gate) x up, whose outlier channels per-token scales miss; `w8a8d` gives that one
    Linear the bf16 form and every other one W8A8, so on such an input its error is the bf16 form's."""
    p = get_precision("fp32-w8a8d-float")
    lin = _linear(bias=False)
    x = torch.randn(32, 96)
    x[:, [3, 40]] *= 60.0  # two outlier channels: a per-token scale spends its 8 bits on them
    ref = lin(x)
    down, other = Int8Linear(lin, p, "model.layers.3.mlp.down_proj"), Int8Linear(lin, p, "model.layers.3.mlp.up_proj")
    assert (down.prefill, other.prefill) == ("bf16", "w8a8")
    assert not hasattr(down, "qweight") and not hasattr(other, "weight_bf16")  # one copy each, not both
    err = {k: float((m(x) - ref).norm() / ref.norm()) for k, m in (("down", down), ("other", other))}
    assert err["down"] < 0.01 < err["other"] < 0.1, err
    assert torch.equal(down(x[:1]), lin(x[:1])) and torch.equal(other(x[:1]), lin(x[:1]))  # decode stays float
    from confkv.testing import tiny_model

    model, _ = tiny_model("qwen2")
    apply_precision(model, p)
    forms = {n.rsplit(".", 1)[-1]: m.prefill for n, m in model.named_modules() if isinstance(m, Int8Linear)}
    assert forms == {"q_proj": "w8a8", "k_proj": "w8a8", "v_proj": "w8a8", "o_proj": "w8a8", "gate_proj": "w8a8",
                     "up_proj": "w8a8", "down_proj": "bf16"}  # fmt: skip


def test_w8a8d_weight_bytes_count_the_down_projection_apart():
    from confkv.models.precision_choice import weight_bytes

    p = get_precision("fp32-w8a8d-float")
    down = SHAPES.layers * 256 * 64
    rest = SHAPES.params - down
    assert weight_bytes(p, SHAPES) == int((4 + 1) * rest + (4 + 2) * down)  # fp32 decode copy + INT8 or bf16
    assert weight_bytes(get_precision("fp32-w8a8-float"), SHAPES) == 5 * SHAPES.params


def test_error_forms_split_weights_from_activations_and_smoothing_tames_an_outlier_channel():
    """On a layer whose input has outlier channels (as the down projection's SiLU(gate) x up does), the error is the
    activations' (`a8` near `w8a8`, `w8` far below), smoothing calibrated on other rows with the same channels brings
    W8A8 down, and the bf16 form stays below every INT8 form."""
    from confkv.models.quant_error import form_errors, summarize
    from confkv.testing import tiny_model

    model, _ = tiny_model("qwen2")
    with torch.no_grad():  # outlier input channels for layer 1's down_proj, on every token
        model.model.layers[1].mlp.up_proj.weight[[3, 9], :] *= 60.0
    forms = ("bf16", "w8a8", "w8", "a8", "w8g128", "w8a8-sq0.5")
    errs = form_errors(model, torch.tensor([list(range(3, 60))]), forms, calib_ids=torch.tensor([list(range(60, 110))]))
    down = {f: errs[f]["model.layers.1.mlp.down_proj"] for f in forms}
    assert down["bf16"] < down["w8"] < down["a8"] <= 1.5 * down["w8a8"], down
    assert down["w8a8-sq0.5"] < 0.7 * down["w8a8"], down
    assert len(errs["w8"]) == 2 * 7 and all(e > 0 for f in forms for e in errs[f].values())
    rows = {r["form"]: r for r in summarize(errs)}
    assert set(rows["w8a8"]["by_kind"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert rows["w8a8"]["worst"][0][0] == "model.layers.1.mlp.down_proj"


@pytest.mark.parametrize("forms", [("w8a8-sq",), ("w8a8-sq1.5",), ("int4",), ()])
def test_error_forms_reject_unknown_forms_and_smoothing_without_calibration(forms):
    from confkv.models.quant_error import check_forms, form_errors
    from confkv.testing import tiny_model

    with pytest.raises(ValueError):
        check_forms(forms)
    model, _ = tiny_model("qwen2")
    with pytest.raises(ValueError, match="calib"):
        form_errors(model, torch.tensor([[3, 4, 5]]), ("w8a8-sq0.5",))


@pytest.fixture
def row_kernel_restored():
    from confkv.models.gemv import row_kernel, set_row_kernel

    was = row_kernel()
    yield
    set_row_kernel(was)


def test_bf16_rows_run_through_the_kernel_measured_faster_here(tmp_path, monkeypatch, row_kernel_restored):
    """Which of `torch.mv` and `F.linear` streams bf16 weights faster differs by machine (AMX Xeon: mv; Zen 4:
    linear), so it is timed with the precision timings, reported, and read back by every later load."""
    from confkv.models.gemv import ROW_KERNELS, bf16_row, row_kernel, set_row_kernel
    from confkv.models.precision_choice import row_kernel_of, use_measured_row_kernel
    from confkv.testing import tiny_config

    lin = _linear().to(torch.bfloat16)
    x = torch.randn(96).to(torch.bfloat16)
    outs = {}
    for kernel in ROW_KERNELS:
        set_row_kernel(kernel)
        outs[kernel] = bf16_row(lin.weight, x, lin.bias).float()
    ref = torch.nn.functional.linear(x.float(), lin.weight.float(), lin.bias.float())
    for out in outs.values():
        assert (out - ref).norm() < 0.01 * ref.norm()  # one form, two summation orders
    with pytest.raises(ValueError):
        set_row_kernel("gemm")
    assert row_kernel_of(TIMINGS) == "linear" and row_kernel_of({**TIMINGS, "row/mv": 1.0}) == "mv"
    assert row_kernel_of({"fp32/decode/float": 1.0}) is None  # timings from before kernels were compared
    assert "bf16 decode rows via linear" in "\n".join(choose(TIMINGS, SHAPES, {"fp32": "ok"}, "x").lines)
    monkeypatch.setenv("CONFKV_HOME", str(tmp_path))
    config = tiny_config("qwen2")
    set_row_kernel("mv")
    assert use_measured_row_kernel(config) is None and row_kernel() == "mv"  # nothing timed here: left alone
    path = cache_path(Shapes.from_config(config))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"timings": {"row/mv": 3.0, "row/linear": 2.0}}))
    assert "via linear" in use_measured_row_kernel(config) and row_kernel() == "linear"


def test_models_precision_prints_the_resolved_name_alone_on_stdout(tmp_path, monkeypatch, row_kernel_restored):
    """`frontier_resume.sh` pins `auto` to the name it resolves to here: stdout must be that name and nothing else."""
    from typer.testing import CliRunner

    import confkv.models.precision_choice as pc
    from cli.main import app
    from confkv.testing import tiny_config

    tiny_config("qwen2").save_pretrained(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # `auto` on CUDA is bf16, untimed
    monkeypatch.setattr(pc, "cached_timings", lambda shapes, progress=None: (dict(TIMINGS), "injected"))
    monkeypatch.setattr(pc, "allowed", lambda name: {n: "ok" for n in PRECISIONS})
    runner = CliRunner()
    auto = runner.invoke(app, ["models", "precision", str(tmp_path)])
    assert auto.exit_code == 0, auto.output
    assert auto.stdout == "bf16-float-w8a8\n" and "precision auto: injected" in auto.stderr
    named = runner.invoke(app, ["models", "precision", str(tmp_path), "--dtype", "fp32"])
    assert named.exit_code == 0 and named.stdout == "fp32\n"
    bad = runner.invoke(app, ["models", "precision", str(tmp_path), "--dtype", "int4"])
    assert bad.exit_code == 1 and "unknown dtype 'int4'" in bad.stderr and bad.stdout == ""
    missing = runner.invoke(app, ["models", "precision", str(tmp_path / "none")])
    assert missing.exit_code == 1 and missing.stdout == "" and "error:" in missing.stderr
