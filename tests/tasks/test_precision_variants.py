"""Faithful against cut precision, for rmsnorm, softmax and rope: the gate's own CPU cases, against the contract's tolerance
table, pass the honest Triton candidate's faithful variants (another summation order or tiling) and reject every
cut that keeps a declared-float32 quantity in bf16 (rmsnorm's sum of squares; softmax's sum, running sum, max;
rope's inverse frequencies or angles). The frozen cases
are the same at every check, so a cut they reject is rejected by every check. MLA's are in
tests/adversarial/test_mla_precision.py. Each op's variants: tasks/<op>/precision_variants.py.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from pathlib import Path

import pytest

from ferret.contract.task import Task
from tasks.variants import failing_stages, frozen_cases

REPO = Path(__file__).resolve().parents[2]
# Each op's stages the contract declares float32 (a statistic or the angles): a bf16 copy must fail there.
FLOAT32_STAGES = {"rmsnorm": ("inv_rms",), "softmax": ("row_sum", "row_max"), "rope": ("inv_freq", "cos", "sin")}
OPS = tuple(FLOAT32_STAGES)


def _variants(op: str):
    return importlib.import_module(f"tasks.{op}.precision_variants")


@cache
def _gate(op: str):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    task = Task.load(REPO / "contracts" / f"{op}.yaml")
    return task.contract, frozen_cases(task, "cpu")


def _params(kind: str) -> list:
    return [(op, name) for op in OPS for name in sorted(getattr(_variants(op), kind))]


@pytest.mark.parametrize("op,name", _params("FAITHFUL"))
def test_faithful_variant_passes_every_gate_case(op, name, tmp_path):
    contract, cases = _gate(op)
    assert failing_stages(_variants(op).load_variant(name, tmp_path).run, contract, cases) == []


@pytest.mark.parametrize("op,name", _params("CUTS"))
def test_precision_cut_is_rejected_by_the_gate_cases(op, name, tmp_path):
    contract, cases = _gate(op)
    failing = failing_stages(_variants(op).load_variant(name, tmp_path).run, contract, cases)
    assert any(f" {stage} " in line for line in failing for stage in FLOAT32_STAGES[op]), failing
