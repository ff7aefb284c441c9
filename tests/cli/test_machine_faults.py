"""A fault of the machine on the command line: exit 5, one line saying what to free, and no verdict recorded
against the candidate. The disk is made short by standing in for the judge's view of its free space."""

from __future__ import annotations

import sys
from collections import namedtuple
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM  # noqa: E402

from ferret.cli.main import EXIT_MACHINE, app  # noqa: E402
from ferret.gate import machine  # noqa: E402
from ferret.gate.report import read_report  # noqa: E402

Usage = namedtuple("Usage", "total used free")


@pytest.fixture(scope="module")
def gate(tmp_path_factory) -> Path:
    from ferret.gate.build import build_gate

    return build_gate(RMSNORM_CONTRACT, gates_dir=tmp_path_factory.mktemp("machine-gates"), profile="cpu")


def test_a_disk_too_small_for_the_check_is_refused_up_front_with_exit_5(gate, monkeypatch):
    free = 5 << 20  # 5 MiB: below the spare room a check keeps, whatever it writes
    monkeypatch.setattr(machine, "disk_usage", lambda path: Usage(1 << 40, (1 << 40) - free, free))
    before = len(read_report(gate).verdicts)
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(TRITON_RMSNORM), "--gates-dir", str(gate.parent), "--profile", "cpu"]
    )
    assert result.exit_code == EXIT_MACHINE == 5, result.output
    assert "GATE_RESULT" not in result.stdout and "Traceback" not in result.output
    line = next(line for line in result.stderr.splitlines() if line.startswith("ferret: "))
    assert line.startswith("ferret: machine fault: not enough disk for this check: ")
    assert "5.0 MiB free" in line and "writes about" in line
    assert "nothing was recorded against the candidate" in line and "run the check again" in line
    assert len(read_report(gate).verdicts) == before  # no verdict, pass or fail


def test_the_estimate_grows_with_the_gate_and_counts_the_timed_pool_on_a_gpu(gate):
    from ferret.contract.task import Task
    from ferret.gate.context import GateContext
    from ferret.gate.lock import verify_gate
    from ferret.gate.models import GateManifest

    context = GateContext(Task.load(RMSNORM_CONTRACT), GateManifest.model_validate(verify_gate(gate)), gate)
    cpu = machine.check_writes(context, "cpu", timed=False)
    temp = next(n for folder, n in cpu.items() if folder != gate)
    inputs = sum(r.inputs.nbytes for r in context.manifest.variants)
    assert temp > 2 * inputs  # inputs, and the results file of every variant, and the fresh cases
    assert cpu[gate] > 0  # the verdict


def test_enough_disk_lets_the_check_run(gate, monkeypatch):
    monkeypatch.setattr(machine, "disk_usage", lambda path: Usage(1 << 40, 0, 1 << 40))
    from ferret.contract.task import Task
    from ferret.gate.context import GateContext
    from ferret.gate.lock import verify_gate
    from ferret.gate.models import GateManifest

    context = GateContext(Task.load(RMSNORM_CONTRACT), GateManifest.model_validate(verify_gate(gate)), gate)
    machine.require_disk(context, "cpu", timed=False)  # no exception
