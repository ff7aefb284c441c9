"""Batch invariance (opt-in, `cases.batch_invariance`): the first and last requests of the first correctness
case run alone must give bitwise their rows of the full batch. On a copy of the rmsnorm contract with it on
(batch dim M): the honest Triton candidate passes; one whose rows depend on M fails, the detection named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import TRITON_RMSNORM, write_contract  # noqa: E402

from ferret.contract.task import Task  # noqa: E402
from ferret.gate.judge import check, summary  # noqa: E402


def _batch_invariant(data: dict) -> None:
    data["cases"]["cpu"] = [c for c in data["cases"]["cpu"] if c["name"] in ("typical", "single_element")]
    data["cases"].pop("fresh", None)
    data["cases"].pop("boundaries", None)  # boundaries are covered by fresh cases: none without them
    data["cases"]["batch_invariance"] = {"dim": "M"}


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    return write_contract(tmp_path_factory.mktemp("batch-project"), _batch_invariant, name="rmsnorm_batch.yaml", link_tasks=True)


def test_off_by_default_in_the_shipped_contracts():
    root = Path(__file__).resolve().parents[2] / "contracts"
    for path in sorted(root.glob("*.yaml")):
        if not path.name.endswith(".tolerances.yaml"):
            assert Task.load(path).contract.cases.batch_invariance is None, path


def test_honest_candidate_is_batch_invariant(contract, tmp_path):
    verdict, _ = check(contract, TRITON_RMSNORM, gates_dir=contract.parent.parent / "gates", profile="cpu")
    assert verdict.passed, summary(verdict)
    part = verdict.parts["batch_invariance"]
    assert part.status == "pass" and "2 requests of typical@bfloat16" in part.detail, part


def test_rows_that_depend_on_the_batch_size_fail(contract, tmp_path):
    source = TRITON_RMSNORM.read_text()
    honest = "y = x * inv_rms[:, None] * weight[None, :]"
    assert honest in source
    cheat = tmp_path / "batch_dependent.py"
    cheat.write_text(source.replace(honest, honest + " * (1.0 + M * 0.00025)"))
    verdict, _ = check(contract, cheat, gates_dir=contract.parent.parent / "gates", profile="cpu")
    assert not verdict.passed
    assert verdict.parts["batch_invariance"].status == "fail"
    found = [d for d in verdict.detections if d.cheat == "batch_variant"]
    assert len(found) == 1 and found[0].variant == "typical@bfloat16", verdict.detections
    assert "case typical@bfloat16, request 0" in found[0].evidence and "y alone against in the batch" in found[0].evidence
    assert "first" in found[0].evidence or "index" in found[0].evidence, found[0].evidence
