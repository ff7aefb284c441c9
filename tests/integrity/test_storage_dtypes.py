"""The scan allows a cast to the float8 storage a contract declares (an FP8 cache's codes), and only that: float8
anywhere else is still a downcast."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO, RMSNORM_CONTRACT  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.gate.scan import scan_candidate, storage_dtypes  # noqa: E402
from ferret.integrity.scan import scan_source  # noqa: E402

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _store_codes(x_ptr, codes_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(codes_ptr + offs, tl.load(x_ptr + offs).to({dtype}))


def run(inputs, outputs, params, trace=None):
    _store_codes[(1,)](inputs["x"], outputs["y"], 16)
"""


def _downcasts(dtype: str, storage: tuple[str, ...]) -> list[str]:
    result = scan_source(KERNEL.format(dtype=dtype), "fp8_cast.py", storage_dtypes=storage)
    return [f.message for f in result.findings if f.cheat == "lower_precision"]


def test_a_cast_to_the_declared_float8_storage_is_allowed():
    assert _downcasts("tl.float8e4nv", ("float8_e4m3fn",)) == []
    assert _downcasts("torch.float8_e4m3fn", ("float8_e4m3fn",)) == []


def test_float8_anywhere_else_is_still_a_downcast():
    assert _downcasts("tl.float8e4nv", ()), "float8 without a contract declaring it"
    assert _downcasts("tl.float8e5", ("float8_e4m3fn",)), "another float8 than the one declared"
    assert _downcasts("tl.bfloat16", ("float8_e4m3fn",)), "a declared float8 storage allows no other low dtype"


def test_the_judge_passes_the_contracts_storage_to_the_scan(tmp_path):
    fp8 = load_contract(CONTRACTS / "mla_attention_fp8.yaml")
    assert storage_dtypes(fp8) == {"float8_e4m3fn"}
    candidate = tmp_path / "fp8_cast.py"
    candidate.write_text(KERNEL.format(dtype="tl.float8e4nv"))
    assert [d.cheat for d in scan_candidate(candidate, fp8) if d.cheat == "lower_precision"] == []
    rmsnorm = load_contract(RMSNORM_CONTRACT)
    assert storage_dtypes(rmsnorm) == set()
    assert "lower_precision" in {d.cheat for d in scan_candidate(candidate, rmsnorm)}


def test_the_honest_fp8_candidate_scans_clean():
    fp8 = load_contract(CONTRACTS / "mla_attention_fp8.yaml")
    candidate = REPO / "tasks" / "mla_attention_fp8" / "candidates" / "triton_mla_fp8.py"
    assert scan_candidate(candidate, fp8) == []
