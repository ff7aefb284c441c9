"""One variant's verdict from its result file (`decide.judge_variant`), on the rmsnorm CPU gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ferret.contract.load import load_contract
from ferret.gate import decide
from ferret.gate.build import build_gate
from ferret.wire import VariantStatus

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    """typical@float32 of a fresh rmsnorm gate: its ids, golden stages and an answer file writer."""
    gate = build_gate(CONTRACT, tmp_path_factory.mktemp("decide-gates"), "cpu")
    record = next(v for v in json.loads((gate / "manifest.json").read_text())["variants"] if v["id"] == "typical@float32")
    golden = load_file(str(gate / record["golden_file"]))
    return (record["id"], record["case"], record["dtype"], record["part"]), golden


def _answer(golden: dict[str, torch.Tensor], y: torch.Tensor, path: Path) -> Path:
    save_file(
        {**{f"{kind}.y": y.clone() for kind in ("fast0", "fast1", "fast2", "traced")}, "trace.inv_rms": golden["inv_rms"]},
        str(path),
    )
    return path


def test_a_comparison_the_gpu_has_no_memory_for_is_made_on_the_host_with_the_same_verdict(variant, tmp_path, monkeypatch):
    """Large MLA stages are compared in float64 on the GPU; where the card is short of memory (other processes
    hold it) the same comparison is made on the host: the verdict is the candidate's, never the judge's fault."""
    ids, golden = variant
    contract = load_contract(CONTRACT)
    real_compare = decide.compare_to_golden
    devices = []

    def gpu_out_of_memory(*args, device="cpu", **kwargs):
        devices.append(device)
        if device == "cuda":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.25 GiB.")
        return real_compare(*args, device=device, **kwargs)

    monkeypatch.setattr(decide.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(decide.torch.cuda, "empty_cache", lambda: devices.append("emptied"))
    monkeypatch.setattr(decide, "compare_to_golden", gpu_out_of_memory)
    right = decide.judge_variant(
        contract, ids, golden, VariantStatus(ok=True), _answer(golden, golden["y"].float(), tmp_path / "right.safetensors"), {}
    )
    assert right.passed and right.failure is None and [s.stage for s in right.stages] == ["inv_rms", "y"]
    assert devices == ["cuda", "emptied", "cpu", "cpu"]
    wrong = decide.judge_variant(
        contract,
        ids,
        golden,
        VariantStatus(ok=True),
        _answer(golden, golden["y"].float() * 1.5, tmp_path / "wrong.safetensors"),
        {},
    )
    assert not wrong.passed and wrong.first_failing_stage == "y" and wrong.failure is None


def _untraced(contract, case: str):
    """The contract with `case` judged on its outputs alone (`traced: false`)."""
    cases = [c.model_copy(update={"traced": False}) if c.name == case else c for c in contract.cases.cpu]
    return contract.model_copy(update={"cases": contract.cases.model_copy(update={"cpu": cases})})


def test_a_case_judged_on_its_outputs_alone_needs_no_traced_run_and_reads_no_trace(variant, tmp_path):
    """`traced: false`: the variant's answer file holds the fast calls only; its intermediate stages are not
    exposed (whatever trace the file holds is not read), and its output is judged as on any other case."""
    ids, golden = variant
    contract = _untraced(load_contract(CONTRACT), ids[1])
    y = golden["y"].float()
    fast_only = {f"fast{r}.y": y.clone() for r in range(3)}
    right = tmp_path / "right.safetensors"
    save_file({**fast_only, "trace.inv_rms": golden["inv_rms"] * 3}, str(right))
    judged = decide.judge_variant(contract, ids, golden, VariantStatus(ok=True), right, {})
    assert judged.passed and judged.traced_equals_fast
    assert {s.stage: s.exposed for s in judged.stages} == {"inv_rms": False, "y": True}
    wrong = tmp_path / "wrong.safetensors"
    save_file({f"fast{r}.y": y * 1.01 for r in range(3)}, str(wrong))
    assert not decide.judge_variant(contract, ids, golden, VariantStatus(ok=True), wrong, {}).passed
