"""Faults of the machine told from the candidate's (ferret/gate/machine.py): a full disk met by the harness, or one
the judge finds short itself, and a GPU the judge's own process lost too, are MachineFault; the same words raised
or printed by the candidate are the candidate's. And the judge, given a run whose results could not be saved for
want of disk, records no verdict."""

from __future__ import annotations

import errno
import sys
from collections import namedtuple
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM  # noqa: E402

from ferret import wire  # noqa: E402
from ferret.errors import MachineFault  # noqa: E402
from ferret.gate import machine  # noqa: E402
from ferret.gate.machine import RunEvidence, evidence_of, machine_fault_in, machine_faults  # noqa: E402

Usage = namedtuple("Usage", "total used free")
ENOSPC_SAVE = (
    'SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
)
# What the runner's status holds when its own save of the results failed: frames of the harness only.
HARNESS_TRACEBACK = """Traceback (most recent call last):
  File "/x/.runtime/ferret/sandbox/runner.py", line 308, in _run_one
    save_file(tensors, str(out / wire.tensors_file(variant.id)))
  File "/venv/lib/python3.12/site-packages/safetensors/torch.py", line 286, in save_file
    serialize_file(_flatten(tensors), filename, metadata=metadata)
safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull })
"""
# The same words, raised by the candidate's own code.
CANDIDATE_TRACEBACK = """Traceback (most recent call last):
  File "/x/.runtime/ferret/sandbox/runner.py", line 120, in _first_call
    entry(inputs, outputs, params)
  File "/tmp/ferret-candidate-abc/candidate.py", line 9, in run
    raise OSError(28, "No space left on device")
OSError: [Errno 28] No space left on device
"""


def _plenty(monkeypatch, free: int = 1 << 40) -> None:
    monkeypatch.setattr(machine, "disk_usage", lambda path: Usage(1 << 41, (1 << 41) - free, free))


def _run(tmp_path: Path, status: wire.VariantStatus, device: str = "cpu") -> RunEvidence:
    return evidence_of({"typical@float32": status, "b@float32": None}, None, tmp_path, device)


def test_the_harness_saving_into_a_full_disk_is_the_machines_fault(tmp_path, monkeypatch):
    _plenty(monkeypatch)  # freed since by another check: the traceback alone tells whose write it was
    status = wire.VariantStatus.failed(wire.FailureKind.EXCEPTION, ENOSPC_SAVE, HARNESS_TRACEBACK)
    fault = machine_fault_in(_run(tmp_path, status))
    assert isinstance(fault, MachineFault)
    assert "filled up during the candidate's run (typical@float32: " in str(fault)
    assert "nothing was recorded against the candidate" in str(fault) and "run the check again" in str(fault)


def test_a_candidate_raising_disk_full_on_a_disk_with_room_is_the_candidates(tmp_path, monkeypatch):
    _plenty(monkeypatch)
    status = wire.VariantStatus.failed(
        wire.FailureKind.EXCEPTION, "OSError: [Errno 28] No space left on device", CANDIDATE_TRACEBACK
    )
    assert machine_fault_in(_run(tmp_path, status)) is None


def test_a_crash_whose_last_words_say_disk_full_counts_only_where_the_disk_is_short(tmp_path, monkeypatch):
    crash = wire.VariantStatus.failed(
        wire.FailureKind.CRASH, "exited with code 1; last output: OSError: [Errno 28] No space left on device"
    )
    _plenty(monkeypatch)
    assert machine_fault_in(_run(tmp_path, crash)) is None
    _plenty(monkeypatch, free=1 << 20)
    assert isinstance(machine_fault_in(_run(tmp_path, crash)), MachineFault)


def test_a_disk_the_candidate_filled_itself_stays_its_own(tmp_path, monkeypatch):
    _plenty(monkeypatch, free=1 << 20)
    with open(tmp_path / "junk", "wb") as junk:  # sparse: its size, not its blocks, is what is counted
        junk.truncate(machine.CANDIDATE_WRITES_CEILING + 1)
    status = wire.VariantStatus.failed(wire.FailureKind.EXCEPTION, ENOSPC_SAVE, HARNESS_TRACEBACK)
    assert machine_fault_in(_run(tmp_path, status)) is None


def test_a_stress_run_that_met_a_full_disk_is_read_too(tmp_path, monkeypatch):
    _plenty(monkeypatch, free=1 << 20)
    run = evidence_of({}, wire.StressResult(error=ENOSPC_SAVE), tmp_path, "cuda")
    fault = machine_fault_in(run, lost=lambda: False)
    assert isinstance(fault, MachineFault) and "(stress: " in str(fault)


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: CUDA error: cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable",
        "RuntimeError: CUDA error: GPU is lost",
        "NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.",
    ],
)
def test_a_lost_gpu_is_the_machines_fault_only_where_the_judge_lost_it_too(tmp_path, monkeypatch, message):
    _plenty(monkeypatch)
    status = wire.VariantStatus.failed(wire.FailureKind.EXCEPTION, message, CANDIDATE_TRACEBACK.replace("OSError", "X"))
    fault = machine_fault_in(_run(tmp_path, status, "cuda"), lost=lambda: True)
    assert isinstance(fault, MachineFault) and "the GPU was lost" in str(fault) and "nvidia-smi" in str(fault)
    assert machine_fault_in(_run(tmp_path, status, "cuda"), lost=lambda: False) is None
    assert machine_fault_in(_run(tmp_path, status, "cpu"), lost=lambda: True) is None


def test_the_judges_own_faults_become_machine_faults_and_nothing_else_does():
    class SafetensorError(Exception):
        pass

    faults = [
        OSError(errno.ENOSPC, "No space left on device"),
        SafetensorError(ENOSPC_SAVE),
        MemoryError(),
    ]
    for err in faults:
        with pytest.raises(MachineFault):
            with machine_faults("cpu"):
                raise err
    with pytest.raises(MachineFault, match="lost the GPU"):
        with machine_faults("cuda", lost=lambda: True):
            raise RuntimeError("CUDA error: cudaErrorDevicesUnavailable")
    for err in (ValueError("No space left on device"), RuntimeError("CUDA error: cudaErrorDevicesUnavailable")):
        with pytest.raises(type(err)):
            with machine_faults("cuda", lost=lambda: False):
                raise err


def test_the_judge_records_no_verdict_when_the_harness_could_not_save_for_want_of_disk(tmp_path, monkeypatch):
    """The runner's save of the results met a full disk (checks side by side filled it): the judge raises
    MachineFault instead of charging the candidate an `exception`, and its gate's report gains no verdict."""
    from ferret.contract.task import Task
    from ferret.gate import judge as judge_module
    from ferret.gate.candidate_run import CandidateRun
    from ferret.gate.report import read_report

    judge = judge_module.Judge(Task.load(RMSNORM_CONTRACT), tmp_path / "gates", "cpu")
    before = len(read_report(judge.gate).verdicts)

    def full_disk(context, candidate, workdir, options):
        ids = [r.id for r in context.manifest.variants] + [f.id for f in options.fresh]
        failed = wire.VariantStatus.failed(wire.FailureKind.EXCEPTION, ENOSPC_SAVE, HARNESS_TRACEBACK)
        return CandidateRun({ids[0]: failed}, None)

    monkeypatch.setattr(judge_module, "run_candidate", full_disk)
    with pytest.raises(MachineFault, match="filled up during the candidate's run"):
        judge.check(TRITON_RMSNORM)
    assert len(read_report(judge.gate).verdicts) == before
