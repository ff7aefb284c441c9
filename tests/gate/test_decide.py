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
    real_compare = decide.compare_stage
    devices = []

    def gpu_out_of_memory(*args, device="cpu", **kwargs):
        devices.append(device)
        if device == "cuda":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.25 GiB.")
        return real_compare(*args, device=device, **kwargs)

    monkeypatch.setattr(decide.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(decide.torch.cuda, "empty_cache", lambda: devices.append("emptied"))
    monkeypatch.setattr(decide, "compare_stage", gpu_out_of_memory)
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
