"""The judge makes the gate's context (task, verified manifest, gate folder) once, frozen, and every step of a
check that reads the gate is given that one object."""

from __future__ import annotations

import dataclasses

import pytest
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM

from ferret.contract.task import Task
from ferret.gate import judge as judge_module
from ferret.gate.context import GateContext
from ferret.gate.judge import Judge


def test_the_judge_makes_one_frozen_context_and_a_check_passes_it_whole(rmsnorm_gates_dir, monkeypatch):
    judge = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu")
    context = judge.context
    assert isinstance(context, GateContext)
    assert (context.task, context.manifest, context.gate) == (judge.task, judge.manifest, judge.gate)
    assert context.contract is judge.contract is judge.task.contract
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.gate = rmsnorm_gates_dir  # type: ignore[misc]

    given = []

    def passing_on(name):
        real = getattr(judge_module, name)

        def wrapper(first, *args, **kwargs):
            given.append((name, first))
            return real(first, *args, **kwargs)

        monkeypatch.setattr(judge_module, name, wrapper)

    for name in ("write_gate_inputs", "run_candidate"):
        passing_on(name)
    verdict = judge.check(TRITON_RMSNORM, run_stress=False, measure_speed=False)
    assert verdict.passed
    assert sorted(name for name, _ in given) == ["run_candidate", "write_gate_inputs"]
    assert all(first is context for _, first in given)
