"""Each variant judged against its golden stages as soon as the candidate's process has moved past it.

    with VariantComparisons(contract, to_judge, out, judge_variant) as comparisons:
        run = run_candidate(context, candidate, workdir, CandidateRunOptions(..., on_moved=comparisons.candidate_moved_to))
        results = comparisons.results(run.statuses, clock)

The candidate's runner writes a variant's result file, then its status file, then the index of the next
variant (`ferret.sandbox.runner.main`), so once the index has moved past a variant its files are complete.
Judging it then, in a thread, overlaps the loading and comparing of its stages with the candidate's later
variants (on a warm MLA gate that comparison was 3-5 s of a check's serial path, after the run).

What is judged never depends on when: after the process has ended, every variant's status is read again
(`CandidateRun.statuses`), and a variant whose status differs from the one its early judgment read (the
candidate rewrote it, the judge's fault handling replaced it, or it was missing then) is judged again from
the files as they are now. A result file rewritten after its early judgment is not read again: the early
judgment saw the result the candidate's process had given when it moved on, which is the variant's result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import torch

from ferret import wire
from ferret.contract.model import Contract
from ferret.gate.candidate_run import read_status
from ferret.gate.decide import MovedCheck, VariantIds
from ferret.gate.models import VariantResult
from ferret.gate.phases import PhaseClock

# One variant to judge: its ids, its golden stages (loaded when judged), its inputs' content hashes and the check of its
# call on moved inputs (None where the job asked for none).
ToJudge = tuple[VariantIds, Callable[[], dict[str, torch.Tensor]], dict[str, str], "MovedCheck | None"]
JudgeVariant = Callable[
    [Contract, VariantIds, dict[str, torch.Tensor], "wire.VariantStatus | None", Path, dict[str, str], "MovedCheck | None"],
    VariantResult,
]
_Judged = tuple[VariantResult, float, float]  # the result, when its judging began and ended (perf_counter)


def _same_status(early: wire.VariantStatus | None, final: wire.VariantStatus | None) -> bool:
    if early is None or final is None:
        return early is final
    return early.to_json() == final.to_json()


class VariantComparisons:
    """The variants of `to_judge` (in the order of the candidate's job) judged `workers` at a time, each as soon
    as the candidate's process has moved past it, the rest after the run."""

    def __init__(self, contract: Contract, to_judge: list[ToJudge], out: Path, judge: JudgeVariant, workers: int):
        self._contract, self._to_judge, self._out, self._judge = contract, to_judge, out, judge
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ferret-compare")
        self._early: dict[int, tuple[wire.VariantStatus | None, Future[_Judged]]] = {}

    def __enter__(self) -> VariantComparisons:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def candidate_moved_to(self, position: int) -> None:
        """The candidate's process started step `position`: every variant before it is finished, judge those not
        yet judged. `position` is what the candidate's process wrote (any int may come): a forged one only
        makes a variant judged early from missing files, judged again after the run (`results`)."""
        for index in range(min(position, len(self._to_judge))):
            if index not in self._early:
                status = self._status_now(index)
                self._early[index] = (status, self._pool.submit(self._judged, index, status))

    def results(self, statuses: dict[str, wire.VariantStatus | None], clock: PhaseClock) -> list[VariantResult]:
        """Every variant's result, in `to_judge`'s order, from the statuses after the run; each part's
        `compare:<part>` phase is the wall time its judging added after the run (each second said once)."""
        ran_until = time.perf_counter()
        futures: list[Future[_Judged]] = []
        for index, ((vid, *_), *_) in enumerate(self._to_judge):
            final = statuses.get(vid)
            early = self._early.get(index)
            if early is not None and _same_status(early[0], final):
                futures.append(early[1])
            else:
                futures.append(self._pool.submit(self._judged, index, final))
        done = [future.result() for future in futures]
        self._add_phases(done, ran_until, clock)
        return [result for result, _, _ in done]

    def _status_now(self, index: int) -> wire.VariantStatus | None:
        return read_status(self._out / wire.status_file(self._to_judge[index][0][0]))  # None if missing or malformed

    def _judged(self, index: int, status: wire.VariantStatus | None) -> _Judged:
        ids, golden, input_digests, moved = self._to_judge[index]
        begun = time.perf_counter()
        result = self._judge(self._contract, ids, golden(), status, self._out / wire.tensors_file(ids[0]), input_digests, moved)
        return result, begun, time.perf_counter()

    def _add_phases(self, done: list[_Judged], ran_until: float, clock: PhaseClock) -> None:
        spans: dict[str, tuple[float, float]] = {}
        for ((_, _, _, part), *_), (_, begun, ended) in zip(self._to_judge, done, strict=True):
            first, last = spans.get(part, (begun, ended))
            spans[part] = (min(first, begun), max(last, ended))
        covered = ran_until  # judging done while the candidate ran is the run's time, not the comparison's
        for part, (begun, ended) in spans.items():
            clock.add(f"compare:{part}", max(ended - max(begun, covered), 0.0))
            covered = max(covered, ended)
