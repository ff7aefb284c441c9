"""`ferret dispatch --gpus` and `--ray`: a round's proposals judged at once, by local workers one per GPU or by Ray
workers. On the CPU (a stand-in device list; a local Ray cluster), the verdicts are the serial path's and the run
log names the worker (and GPU) of each."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferret_testkit import ray_alone

from ferret.dispatch import Dispatcher
from ferret.dispatch.runlog import FinalCheck
from ferret.roles.base import OptimizerContext, Proposal
from ferret.roles.review import StaticReviewer

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = (REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py").read_text()
WRONG = HONEST.replace("\ndef run(", "\ndef _honest_run(") + (
    "\n\ndef run(inputs, outputs, params, trace=None):\n"
    "    _honest_run(inputs, outputs, params, trace)\n"
    "    outputs['y'].mul_(1.5)\n"
)


class OneRound:
    """Proposes the honest candidate and a wrong one once, then nothing."""

    name = "one-round"

    def __init__(self):
        self.rounds = [[Proposal(source=HONEST, approach="honest"), Proposal(source=WRONG, approach="wrong")]]

    def propose(self, context: OptimizerContext) -> list[Proposal]:
        return self.rounds.pop(0) if self.rounds else []


def _dispatch(gates: Path, runs: Path, profile: str = "cpu", **spread):
    return Dispatcher(
        CONTRACT, optimizer=OneRound(), reviewer=StaticReviewer(), gates_dir=gates, runs_dir=runs, profile=profile, **spread
    ).run()


def _left_out(self, candidate):
    # The final check is a fresh `ferret check` process whichever way the rounds ran: left out, the rounds are compared.
    return FinalCheck(passed=False, exit_code=None, error="left out")


def _said(log):
    return [(c.approach, c.gate_passed, c.gate and c.gate.first_failing_stage, c.error) for r in log.rounds for c in r.candidates]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Dispatcher, "_final_check", _left_out)
        gates = tmp_path_factory.mktemp("gpus-gates")
        return _dispatch(gates, tmp_path_factory.mktemp("serial")), gates


def test_a_round_judged_at_once_on_stand_in_gpus_has_the_serial_verdicts_and_names_each_worker(serial, tmp_path, monkeypatch):
    monkeypatch.setattr(Dispatcher, "_final_check", _left_out)
    log, gates = serial
    spread = _dispatch(gates, tmp_path / "spread", gpus=("0", "1"))
    assert _said(spread) == _said(log) == [("honest", True, None, None), ("wrong", False, "y", None)]
    (round_,) = spread.rounds
    workers = [c.judged_on or "" for c in round_.candidates]
    assert sorted(w.rsplit(" gpu ", 1)[1] for w in workers) == ["0", "1"]
    assert all(w.startswith("local ") for w in workers)
    assert all(c.judged_on is None for r in log.rounds for c in r.candidates)
    assert spread.best is not None and spread.best.approach == "honest" and spread.best.review is not None


def test_a_round_judged_at_once_on_a_ray_cluster_it_started_has_the_serial_verdicts(serial, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(Dispatcher, "_final_check", _left_out)
    log, gates = serial
    assert not ray.is_initialized()
    with ray_alone():  # no other test's cluster for `auto` to join
        on_ray = _dispatch(gates, tmp_path / "ray", ray="auto")
    assert _said(on_ray) == _said(log)
    assert all((c.judged_on or "").startswith("ray node ") for r in on_ray.rounds for c in r.candidates)
    assert not ray.is_initialized()  # the cluster it started ended with its rounds


@pytest.mark.gpu
def test_two_workers_sharing_one_gpu_judge_a_round_and_time_it_in_turns(tmp_path, monkeypatch):
    """Both workers see GPU 0: their correctness runs may overlap, their timed rounds take the GPU alone
    (`ferret/gate/gpu_turns.py`), so both candidates are timed and the verdicts are the serial ones."""
    monkeypatch.setattr(Dispatcher, "_final_check", _left_out)
    log = _dispatch(tmp_path / "gates", tmp_path / "runs", profile="gpu", gpus=("0", "0"))
    (round_,) = log.rounds
    honest, wrong = round_.candidates
    assert honest.gate_passed and honest.speed_measured and honest.speedup is not None
    assert not wrong.gate_passed
    assert honest.judged_on != wrong.judged_on and all(c.judged_on and c.judged_on.endswith(" gpu 0") for c in (honest, wrong))
