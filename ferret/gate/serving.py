"""The judge's side of serving-true timing (`ferret/bench/graph.py` measures it in the timing processes): each case's
CUDA-graph replay and eager wall times put together over the processes, the candidate's replayed answers checked
against the reference, the speed compared replay against replay where both sides capture and eager against eager
otherwise, and a candidate that cannot be captured rejected or reported as the contract's `speed.graph_capture`
says. Nothing a timing process says is trusted: a candidate that reports no capture is treated as not capturable."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch

from ferret import wire
from ferret.bench.graph import capture_cause
from ferret.contract.task import Task
from ferret.gate.answers import check_replayed_answers
from ferret.gate.models import CaseTiming, ServingTiming

CANDIDATE = "candidate"
BASELINE = "baseline"
NOT_CAPTURABLE = "not_graph_capturable"
NOT_MEASURED_ON_CPU = "no GPU: CUDA-graph replay and eager wall time (serving timing) are not measured"

ReplayCheck = Callable[[Path], tuple[int, list[str]]]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _combined(results: list[wire.TimingCaseResult], name: str) -> tuple[float | None, float | None, str | None]:
    """(replay ms, eager ms, why not capturable) of implementation `name`, over the processes that timed it: the mean
    of each; not capturable where any process failed to capture it or reported nothing of it."""
    seen = [r.serving.get(name) for r in results if name in r.samples]
    if not seen:
        return None, None, None
    eager = _mean([s.eager_ms for s in seen if s is not None and s.eager_ms is not None])
    failed = [s for s in seen if s is None or s.replay_ms is None]
    if not failed:
        return _mean([s.replay_ms for s in seen if s is not None and s.replay_ms is not None]), eager, None
    first = failed[0]
    if first is None or first.not_capturable is None:
        return None, eager, "its timing process reported no capture"
    cause = capture_cause(first.not_capturable, first.capture_site)
    return None, eager, f"{cause}: {first.not_capturable}" + (f" (at {first.capture_site})" if first.capture_site else "")


def judge_serving(
    mine: list[wire.TimingCaseResult],
    theirs: list[wire.TimingCaseResult],
    event_ms: dict[str, float],
    graph_capture: str,
    check_replays: ReplayCheck,
) -> tuple[ServingTiming | None, list[str], list[str]]:
    """(the case's serving timing, flags that reject, review lines). `event_ms`: each implementation's time on the
    gate's clock (its GPU time where it did not capture). `check_replays` checks one candidate process's answers
    file (`check_replayed_answers`). None where the baseline's eager time is missing too (nothing to compare)."""
    times = {name: _combined(mine if name == CANDIDATE else theirs, name) for name in event_ms}
    replay = {name: t[0] for name, t in times.items() if t[0] is not None}
    eager = {name: t[1] for name, t in times.items() if t[1] is not None}
    broken = {name: t[2] for name, t in times.items() if t[2] is not None}
    flags, review, checked = [], [], 0
    if CANDIDATE in broken:
        line = f"{NOT_CAPTURABLE}: the candidate's call cannot be captured in a CUDA graph: {broken[CANDIDATE]}"
        (flags if graph_capture == "require" else review).append(line[:700])
    else:
        for result in mine:
            got, wrong = check_replays(Path(result.answers_file or ""))
            checked, flags = checked + got, flags + wrong
    if CANDIDATE not in eager or BASELINE not in eager:
        return None, flags, review
    both_replay = CANDIDATE in replay and BASELINE in replay
    speedup = replay[BASELINE] / replay[CANDIDATE] if both_replay else eager[BASELINE] / eager[CANDIDATE]
    gpu = {name: replay.get(name, event_ms[name]) for name in eager}
    serving = ServingTiming(
        basis="graph_replay" if both_replay else "eager",
        speedup=speedup,
        replay_ms=replay,
        eager_ms=eager,
        host_share={name: max(0.0, 1.0 - gpu[name] / ms) for name, ms in eager.items() if ms > 0},
        not_graph_capturable=broken,
        replay_answers_checked=checked,
    )
    return serving, flags, review


def replay_checker(task: Task, pool: list[dict[str, torch.Tensor]], fresh: list[dict[str, torch.Tensor]]) -> ReplayCheck:
    """`check_replayed_answers` on one case's sets, in the contract's primary dtype, the reference run once per set."""
    golden: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    return lambda path: check_replayed_answers(task, pool, fresh, path, task.contract.primary_dtype, golden)


SpeedBasis = Literal["graph_replay", "eager", "mixed", "gpu_events"]


def serving_speedups(cases: list[CaseTiming]) -> tuple[list[float], SpeedBasis]:
    """(the speedups the target is held to, over `cases` (stable `CaseTiming`s), and their basis): each case's serving
    speedup where every case has one, else the gate's event-time speedups (`gpu_events`)."""
    if not cases or any(c.serving is None for c in cases):
        return [c.speedup for c in cases], "gpu_events"
    served = [c.serving for c in cases if c.serving is not None]
    bases = {s.basis for s in served}
    basis: SpeedBasis = "graph_replay" if bases == {"graph_replay"} else "eager" if bases == {"eager"} else "mixed"
    return [s.speedup for s in served], basis
