"""docs/cheats.md 32 on the CPU: the frozen plan of tests/adversarial/candidates/u10_graph_frozen.py is what a CUDA
graph would replay, and the judge's check of replayed answers (`check_replayed_answers`) names it, while every plain
call is exact. The capture itself needs a GPU (tests/gpu/test_graph_timing_gpu.py): here the launcher is told it is
being captured, which is all its frozen branch reads."""

from __future__ import annotations

import importlib.util
import secrets
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ferret import wire
from ferret.bench import graph, guards
from ferret.contract.task import Task
from ferret.gate.answers import check_replayed_answers
from ferret.gate.inputs import draw_inputs, output_specs

REPO = Path(__file__).resolve().parents[2]
FROZEN = REPO / "tests" / "adversarial" / "candidates" / "u10_graph_frozen.py"
CONTRACT = REPO / "contracts" / "rope.yaml"


@pytest.fixture(scope="module")
def frozen():
    spec = importlib.util.spec_from_file_location("u10_graph_frozen_under_test", FROZEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("u10_graph_frozen_under_test", None)


def _answers(module, task: Task, sets: list[tuple[str, int, dict]], captured: bool, monkeypatch) -> dict:
    """Each set's answer, the launcher told it is being captured or not, into outputs pre-filled with NaN as a
    replay's are."""
    contract, dtype = task.contract, task.contract.primary_dtype
    case = contract.cases_for("cpu")[0]
    monkeypatch.setattr(module, "_capturing", lambda tensor: captured)
    answers = {}
    for source, index, inputs in sets:
        outputs = {n: torch.full(s, float("nan"), dtype=d) for n, (s, d) in output_specs(contract, case, dtype).items()}
        module.run({n: t.clone() for n, t in inputs.items()}, outputs, dict(contract.params))
        answers.update({wire.graph_key(source, index, n): t for n, t in outputs.items()})
    return answers


def test_a_frozen_plan_is_named_by_the_replayed_answers_and_a_plain_call_is_not(frozen, monkeypatch, tmp_path):
    task = Task.load(CONTRACT)
    contract, dtype = task.contract, task.contract.primary_dtype
    case = contract.cases_for("cpu")[0]
    gate_inputs = draw_inputs(contract, case, dtype)
    pool = guards.input_pool(gate_inputs, ["x"], target_bytes=0)
    fresh = [draw_inputs(contract, case, dtype, seed=secrets.randbits(62))]
    plan = graph.replay_plan(pool, fresh)
    path = tmp_path / "answers.safetensors"

    save_file(_answers(frozen, task, plan, captured=False, monkeypatch=monkeypatch), str(path))
    assert check_replayed_answers(task, pool, fresh, path, dtype) == (3, [])

    save_file(_answers(frozen, task, plan, captured=True, monkeypatch=monkeypatch), str(path))
    checked, flags = check_replayed_answers(task, pool, fresh, path, dtype)
    assert checked == 3 and len(flags) == 3, flags  # every set has tokens past 4096, which the frozen plan never writes
    assert all(f.startswith("graph_frozen: a CUDA-graph replay of the candidate's captured call on ") for f in flags)
    assert [f.split(" on ", 1)[1].split(",")[0] for f in flags] == ["fresh input set 0", "pool input set 1", "pool input set 0"]
