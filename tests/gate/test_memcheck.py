"""compute-sanitizer's memcheck on the GPU profile (`ferret.gate.memcheck`): reading its report, deciding from it, and
the verdict's record. The reports below are in the format the tool prints (its documentation's memcheck examples, with
a Triton kernel's frames); the runs under the tool need a GPU and are marked `gpu`."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal

import pytest

from ferret.contract.task import Task
from ferret.gate.context import GateContext
from ferret.gate.judge import check, locate_gate, with_memcheck
from ferret.gate.lock import verify_gate
from ferret.gate.memcheck import (
    MemcheckOptions,
    decide,
    detections_of,
    find_sanitizer,
    parse_report,
    record_of,
    run_memcheck,
)
from ferret.gate.models import GateManifest, MemcheckRecord, PartResult
from ferret.sandbox.launch import ProcessOutcome

REPO = Path(__file__).resolve().parents[2]
ADVERSARIAL = REPO / "tests" / "adversarial" / "candidates"
TOOL = Path("/usr/local/cuda/bin/compute-sanitizer")

WRITE_PAST_END = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at _rmsnorm_kernel+0x4f0 in /tmp/tmpa1b2c3/u8_scratch_past_end.py:52
=========     by thread (35,0,0) in block (0,0,0)
=========     Address 0x7f3e2a000208 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3e2a000200 of size 8 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f6e5f] in libcuda.so.1
=========
a line the candidate printed, not the tool's
========= Invalid __global__ write of size 4 bytes
=========     at _rmsnorm_kernel+0x4f0 in /tmp/tmpa1b2c3/u8_scratch_past_end.py:52
=========     by thread (36,0,0) in block (0,0,0)
=========     Address 0x7f3e2a00020c is out of bounds
=========
========= ERROR SUMMARY: 2 errors
"""

READ_AND_MISALIGNED = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at _softmax_kernel+0x1c0 in kernel.py:20
=========     by thread (0,0,0) in block (7,0,0)
=========     Address 0x7f00000fff00 is out of bounds
=========
========= Invalid __shared__ write of size 4 bytes
=========     at _softmax_kernel+0x2a0 in kernel.py:31
=========
========= Misaligned Shared or Local Address
=========     at _softmax_kernel+0x300 in kernel.py:33
=========
========= Target application returned an error
========= ERROR SUMMARY: 3 errors
"""

CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""

TOOL_FAILED = """\
========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
"""


def test_a_write_past_an_allocation_is_read_as_writes_with_their_lines():
    report = parse_report(WRITE_PAST_END)
    assert report.summary == 2 and [e.kind for e in report.errors] == ["write", "write"]
    assert report.errors[0].lines[0] == "Invalid __global__ write of size 4 bytes"
    assert "1 bytes after the nearest allocation" in " ".join(report.errors[0].lines)
    assert not any("candidate printed" in line for e in report.errors for line in e.lines)  # not the tool's line


def test_reads_shared_writes_and_other_errors_are_told_apart():
    report = parse_report(READ_AND_MISALIGNED)
    assert [e.kind for e in report.errors] == ["read", "write", "other"] and report.summary == 3
    record = record_of(report, TOOL, "typical@float32", 1.5)
    assert (record.ran, record.errors, record.writes, record.reads, record.other) == (True, 3, 1, 1, 1)
    assert record.evidence[0] == "Invalid __global__ read of size 2 bytes"


def test_the_decision_names_each_kind_of_error():
    writes = detections_of(record_of(parse_report(WRITE_PAST_END), TOOL, "odd_width@float32", 2.0))
    assert [(d.cheat, d.catalogue, d.source) for d in writes] == [("write_outside_outputs", [23], "runtime")]
    assert "2 invalid write(s)" in writes[0].evidence and "odd_width@float32" in writes[0].evidence
    assert "nearest allocation" in writes[0].evidence
    mixed = detections_of(record_of(parse_report(READ_AND_MISALIGNED), TOOL, "v", 1.0))
    assert {d.cheat for d in mixed} == {"write_outside_outputs", "out_of_bounds_read", "memory_error"}
    assert detections_of(record_of(parse_report(CLEAN), TOOL, "v", 1.0)) == []
    past_limit = record_of(parse_report("========= ERROR SUMMARY: 40 errors\n"), TOOL, "v", 1.0)
    assert [d.cheat for d in detections_of(past_limit)] == ["memory_error"]


def _outcome(kind: str = "exited", tail: str = "") -> ProcessOutcome:
    return ProcessOutcome(0, kind, "", 1.0, tail, 100.0, "bubblewrap")


def test_a_run_that_gave_no_report_is_memcheck_not_run_never_a_failure():
    record = decide(parse_report(TOOL_FAILED), _outcome(tail="boom"), TOOL, "v", 3.0, MemcheckOptions())
    assert not record.ran and "Target application terminated" in record.reason and "boom" in record.reason
    assert detections_of(record) == []
    timed_out = decide(parse_report(""), _outcome("timeout"), TOOL, "v", 3.0, MemcheckOptions())
    assert not timed_out.ran and "timeout" in timed_out.reason
    clean = decide(parse_report(CLEAN), _outcome(), TOOL, "v", 3.0, MemcheckOptions())
    assert clean.ran and clean.errors == 0


def _judged(integrity: Literal["pass", "fail"] = "pass") -> tuple[dict[str, PartResult], list, bool]:
    return {"integrity": PartResult(status=integrity, detail="static scan clean")}, [], integrity == "pass"


def test_an_error_report_rejects_a_correct_candidate_and_memcheck_not_run_changes_nothing():
    record = record_of(parse_report(WRITE_PAST_END), TOOL, "odd_width@float32", 2.0)
    parts, detections, passed = with_memcheck(_judged(), record)
    assert not passed and parts["integrity"].status == "fail" and "write_outside_outputs" in parts["integrity"].detail
    assert [d.cheat for d in detections] == ["write_outside_outputs"]
    for quiet in (MemcheckRecord(ran=False, reason="not found"), record_of(parse_report(CLEAN), TOOL, "v", 1.0)):
        assert with_memcheck(_judged(), quiet) == _judged()


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_tool_is_found_on_path_or_under_the_cuda_toolkit(tmp_path: Path):
    on_path = _executable(tmp_path / "bin" / "compute-sanitizer")
    assert find_sanitizer({"PATH": str(on_path.parent)}) == on_path
    toolkit = _executable(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer")
    assert find_sanitizer({"PATH": str(tmp_path / "empty"), "CUDA_HOME": str(tmp_path / "cuda")}) == toolkit


def test_the_toolkits_wrapper_script_gives_way_to_the_program_it_runs(tmp_path: Path):
    """A toolkit's bin/compute-sanitizer is a script that needs readlink and dirname, which the sandbox lacks: the
    program beside it is run instead, found through a linked toolkit folder too (/usr/local/cuda -> cuda-13.0)."""
    toolkit = tmp_path / "cuda-13.0"
    _executable(toolkit / "bin" / "compute-sanitizer")
    program = toolkit / "compute-sanitizer" / "compute-sanitizer"
    program.parent.mkdir(parents=True)
    program.write_bytes(b"\x7fELF" + bytes(60))
    program.chmod(0o755)
    (tmp_path / "cuda").symlink_to(toolkit)
    assert find_sanitizer({"PATH": str(tmp_path / "cuda" / "bin")}) == program
    assert find_sanitizer({"PATH": str(tmp_path / "empty"), "CUDA_HOME": str(tmp_path / "cuda")}) == program


def test_a_check_on_the_cpu_profile_says_memcheck_did_not_run(tmp_path: Path):
    verdict, _ = check(
        REPO / "contracts" / "rmsnorm.yaml",
        REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py",
        tmp_path,
        profile="cpu",
    )
    assert verdict.passed and not verdict.memcheck.ran and "CPU profile" in verdict.memcheck.reason


SMALL = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_small.yaml"


@pytest.mark.gpu
def test_on_the_gpu_a_write_past_the_candidates_own_scratch_is_named_by_memcheck(tmp_path: Path):
    """Run alone (`run_memcheck`), not through a check: the runner's own guards may reject the candidate first, and a
    check runs memcheck only for a candidate correct so far."""
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed on this machine")
    task = Task.load(SMALL)
    gate = locate_gate(SMALL, task.contract, tmp_path / "gates", "gpu", lambda m: None)
    context = GateContext(task, GateManifest.model_validate(verify_gate(gate)), gate)
    record = run_memcheck(context, ADVERSARIAL / "u8_scratch_past_end.py")
    assert record.ran and record.writes >= 1, record
    named = detections_of(record)
    assert [d.cheat for d in named][:1] == ["write_outside_outputs"] and "compute-sanitizer" in named[0].evidence
    honest = run_memcheck(context, REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py")
    assert honest.ran and honest.errors == 0, honest


@pytest.mark.gpu
def test_on_the_gpu_an_honest_candidate_passes_memcheck(tmp_path: Path):
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed on this machine")
    honest = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"
    verdict, _ = check(SMALL, honest, tmp_path, profile="gpu", measure_speed=False)
    assert verdict.passed and verdict.memcheck.ran and verdict.memcheck.errors == 0, (verdict.memcheck, verdict.detections)
