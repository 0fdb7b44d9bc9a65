"""confkv.cpu: the CPU named so that kinds sharing a model name stay apart."""

from __future__ import annotations

from pathlib import Path

from confkv.cpu import cpu_flags, cpu_kind, cpu_model

ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx_vnni avx512_vnni

processor\t: 1
cpu family\t: 99
model name\t: something else
"""


def test_cpu_kind_tells_apart_cpus_that_share_a_model_name(tmp_path: Path) -> None:
    zen5, zen3, arm = tmp_path / "zen5", tmp_path / "zen3", tmp_path / "arm"
    zen5.write_text(ZEN5)
    zen3.write_text(ZEN5.replace(": 26", ": 25").replace(": 2\n", ": 1\n").replace(" avx512f avx512bw", "")
                    .replace(" avx512_bf16 avx_vnni avx512_vnni", ""))  # fmt: skip
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n")
    # the first processor's block only; the ISA named in a fixed order
    assert cpu_kind(zen5) == "AMD EPYC (family 26 model 2; avx2 avx512f avx512_bf16 avx512_vnni)"
    assert cpu_kind(zen3) == "AMD EPYC (family 25 model 1; avx2)"
    assert cpu_kind(arm) and "family" not in cpu_kind(arm)  # no x86 family line: the name `platform` knows
    assert cpu_kind(tmp_path / "missing")  # no /proc: still a name, never an error
    assert cpu_model(zen5) == "AMD EPYC" and cpu_flags(zen5).split()[:2] == ["flags", ":"]
    assert cpu_flags(tmp_path / "missing") == ""
