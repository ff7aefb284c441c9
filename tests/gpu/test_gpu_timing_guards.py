"""On the GPU: the timing guards. An honest candidate is timed without a flag; a candidate that stops
working once it is being timed (cheats.md 16, 17, 19: replaying answers left in reused buffers, behaving
differently when timed, impossible speed) passes every correctness part and the static scan, but is
rejected by the timing guards with the cheat named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "tests/gpu/contracts/rmsnorm_small.yaml"
HONEST = REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py"
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu

_LAZY_WRAPPER = '''

def run(inputs, outputs, params, trace=None):
    """Honest whenever its output buffer arrives poisoned (every correctness run of the gate), but when
    the buffer already holds a number (an earlier call wrote it, as when a timing loop reuses buffers),
    returns at once and leaves the old answer there."""
    first = outputs["y"][0, 0].item()
    if first == first:
        return
    _honest_run(inputs, outputs, params, trace)
'''


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


def test_candidate_that_stops_working_when_timed_is_rejected(tmp_path):
    from ferret.gate.judge import check

    source = HONEST.read_text()
    assert source.count("\ndef run(") == 1
    lazy = tmp_path / "rmsnorm_lazy_when_timed.py"
    lazy.write_text(source.replace("\ndef run(", "\ndef _honest_run(") + _LAZY_WRAPPER)
    verdict, _ = check(CONTRACT, lazy, GATES, profile="gpu", progress=_progress)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism")), verdict.parts
    assert not verdict.passed
    assert verdict.parts["integrity"].status == "fail"
    named = {d.cheat for d in verdict.detections if d.source == "timing"}
    assert named & {"impossible_speed", "cross_call_caching"}, verdict.timing
