"""On the GPU: the timing guards. An honest candidate is timed without a flag; a candidate that stops
working once it is being timed (docs/cheats.md 16, 17, 19: replaying answers left in reused buffers, behaving
differently when timed, impossible speed) passes every correctness part and the static scan, but is
rejected by the timing guards with the cheat named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from timing_cheats import IDLE, LAZY, SIDE_STREAM, SIMPLIFIED, write_cheat

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "tests/gpu/contracts/rmsnorm_small.yaml"
LARGE = REPO / "tests/gpu/contracts/rmsnorm_large.yaml"  # floor ~100 us: far above launch overhead
HONEST = REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py"
# When the cheats at the large shape switch: after this many calls of their own module. The candidate's own process
# calls it about 20 times there (3 dtypes x 5 runs, and 5 stress runs); a timing process, at about 0.1 ms a call,
# makes up to 300 calls in each of its rounds (3 and 2 of the 5 in the candidate's two timing processes), spread over
# its `CODE_COPIES` (4) loaded copies of the candidate, each copy a module with its own counter. Switching at a copy's
# call 50 (about the process's call 200) keeps every correctness run honest and makes each process's rounds after its
# first, so the median, the cheat's. (At 200 a copy switched
# only in the third round: the idle cheat was not under the floor, the side-stream one passed, H200 2026-12-01.)
LARGE_SWITCH = 50
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu


def _progress(message: str) -> None:
    import sys
    import time

    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def test_honest_candidate_is_timed_without_a_flag():
    from ferret.gate.judge import check

    verdict, _ = check(CONTRACT, HONEST, GATES, profile="gpu", progress=_progress)
    assert verdict.passed, verdict.parts
    assert verdict.timing.measured and not verdict.timing.detections, verdict.timing
    case = verdict.timing.cases[0]
    assert case.floor_ms and case.candidate_ms > case.floor_ms
    assert case.pool_sets >= 2 and not case.flags
    assert case.wall_ms is not None and case.persisting_l2
    # every output slot's last timed answer, and the timed calls kept at random, checked, in each of the candidate's
    # timing processes
    from ferret import wire

    assert case.answers_checked == len(case.process_ms["candidate"]) * (case.pool_sets + 1 + wire.SAMPLED_ANSWERS)
    # a short case (floor under 5 us): the full count of timing processes per role (5 reference since 3c03ae6; this
    # test still said 3 and failed on the H200 on 2026-12-02 after every other assertion above had passed)
    from ferret.gate.timing import CANDIDATE_PROCESSES, REFERENCE_PROCESSES

    assert len(case.process_ms["candidate"]) == CANDIDATE_PROCESSES
    assert len(case.process_ms["baseline"]) == REFERENCE_PROCESSES


def test_candidate_that_stops_working_when_timed_is_rejected(tmp_path):
    from ferret.gate.judge import check

    lazy = write_cheat(tmp_path / "rmsnorm_lazy_when_timed.py", LAZY)
    verdict, _ = check(CONTRACT, lazy, GATES, profile="gpu", progress=_progress)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism")), verdict.parts
    assert not verdict.passed
    assert verdict.parts["integrity"].status == "fail"
    # It reads its output's first value on the host (`.item()`) to see whether the buffer was written before: the
    # host-numerics watch names that in its first call, before any timing. The timing guards' own catch of it (the
    # fingerprint re-check) is rehearsed on the CPU (tests/gate/test_timing_rehearsal_cpu.py).
    at_run_time = {d.cheat for d in verdict.detections if d.source == "runtime"}
    named = {d.cheat for d in verdict.detections if d.source == "timing"}
    assert "host_numerics" in at_run_time or named & {"impossible_speed", "cross_call_caching"}, verdict.detections


def test_candidate_that_simplifies_the_math_once_timed_is_rejected_by_its_answers(tmp_path):
    """docs/cheats.md 17 (behaving differently when timed) beyond the fingerprint re-check: every timed answer
    goes back to the judge, which runs the reference on that call's input set."""
    from ferret.gate.judge import check

    # Switch in the first timed round: a round times at most 300 calls (b983c42), so a switch at call 2000 never
    # came and the cheat stayed honest (the check passed on the H200, 2026-11-30). The candidate's own process
    # calls it about 25 times (3 dtypes x 5 runs, 5 stress runs): 200 keeps every correctness run honest.
    simplified = write_cheat(tmp_path / "rmsnorm_simplified_when_timed.py", SIMPLIFIED, after=LARGE_SWITCH)
    verdict, _ = check(CONTRACT, simplified, GATES, profile="gpu", progress=_progress)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism", "stress")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    case = verdict.timing.cases[0]
    assert case.answers_checked and case.answers_checked >= 2
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in case.flags), case.flags
    assert "warmup_detection" in {d.cheat for d in verdict.detections if d.source == "timing"}


def test_candidate_that_stops_working_once_timed_is_under_the_floor(tmp_path):
    """docs/cheats.md 19: a time no kernel could reach. Also replayed answers and wrong answers."""
    from ferret.gate.judge import check

    verdict, _ = check(
        LARGE,
        write_cheat(tmp_path / "rmsnorm_idle_when_timed.py", IDLE, after=LARGE_SWITCH),
        GATES,
        profile="gpu",
        progress=_progress,
    )
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "determinism", "stress")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    case = verdict.timing.cases[0]
    assert case.floor_ms and case.candidate_ms < case.floor_ms
    assert any(f.startswith("impossible_speed:") for f in case.flags), case.flags
    assert "impossible_speed" in {d.cheat for d in verdict.detections}


def test_candidate_that_moves_to_a_side_stream_once_timed_is_caught_by_the_wall_clock_or_the_floor(tmp_path):
    """docs/cheats.md 13 at run time: the end event does not wait for the side stream; the synchronized wall time does,
    and the events' time falls under the floor. Which of the two names it depends on the host: the wall-clock guard
    names hidden work only above 1.5x the call's host launch time, and here the honest launch took 83 us on the host
    against ~100 us of GPU work, so the hidden work sat under it (wall 114 us; the floor named it: events 30.7 us
    against a 97.9 us floor; H200). The CUDA side-stream candidate
    (tests/gpu/test_cuda_candidates_gpu.py) is named by the wall clock. The candidate reaches the side stream by
    computed names, which the scan names (`dynamic_access`): its findings are withheld here, so that the run-time
    guards are on trial alone."""
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    path = write_cheat(tmp_path / "rmsnorm_side_stream_when_timed.py", SIDE_STREAM, after=LARGE_SWITCH)
    verdict = Judge(Task.load(LARGE), GATES, profile="gpu").check(path, static=[], progress=_progress)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "determinism", "stress")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    case = verdict.timing.cases[0]
    assert case.wall_ms > 2 * case.candidate_ms, case
    named = {f.partition(":")[0] for f in case.flags}
    assert named & {"side_stream_or_thread", "impossible_speed"}, (case.flags, case.wall_ms, case.host_ms)


def test_honest_candidate_at_the_large_shape_is_timed_without_a_flag():
    from ferret.gate.judge import check

    verdict, _ = check(LARGE, HONEST, GATES, profile="gpu", progress=_progress)
    assert verdict.passed and verdict.timing.measured and not verdict.timing.detections, verdict.timing
    case = verdict.timing.cases[0]
    assert case.floor_ms is not None and case.candidate_ms > 0.9 * case.floor_ms and not case.flags
