"""The judge's side of timing: it draws the input pool, starts the timing process (`ferret.bench.process`)
like a candidate's process, and checks everything that comes back: the answers of the timed calls
against the reference, the floor, the speedups. The timing process shares its memory with the candidate,
so nothing it computes about right answers or limits is trusted."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import TypeAdapter, ValidationError
from safetensors.torch import load_file, save_file

from ferret import wire
from ferret.bench import guards
from ferret.contract.task import Task
from ferret.gate.answers import check_timed_answers
from ferret.gate.inputs import output_specs, prepare_inputs
from ferret.gate.isolation import hidden_from_candidates
from ferret.gate.models import CaseTiming, Detection, GateManifest, TimingResult
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.sandbox.launch import candidate_environment, run_isolated

TIMING_CATALOGUE = {"side_stream_or_thread": [13], "cross_call_caching": [16, 17], "impossible_speed": [19, 18],
                    "harness_patching": [15], "warmup_detection": [17, 16], "input_mutation": [3]}

METHOD = (
    "triton.testing.do_bench median (L2 flushed before every call, persisting L2 reset), a rotating pool of "
    "re-randomized input sets larger than 2x L2 (fresh inputs at fresh addresses for every call), candidate and "
    "baseline interleaved in one process, median over {repeats} rounds; then synchronized wall time, every "
    "output fingerprinted and re-checked against a synchronous call, every timed answer checked by the judge "
    "against the reference on its input set, and the datasheet roofline floor"
)


@dataclass
class _Case:
    """One timed case as the judge prepared it: its job, and the judge's own copy of its input pool."""

    job: wire.TimingCaseJob
    pool: list[dict[str, torch.Tensor]]


def time_candidate(task: Task, manifest: GateManifest, gate: Path, candidate: Path, progress: ProgressLike = None,
                   compare_compiled: bool = True, device: str = "cuda", deadline: float | None = None) -> TimingResult:
    """Time a correct candidate against the baseline in a process of its own; returns a TimingResult.
    torch.compile of the baseline is timed beside them when the contract asks and `compare_compiled`.

    `device="cpu"` is a rehearsal of the guards for tests (the judge never asks for it): the same process,
    pool, output slots, fingerprints and timed-answers check on a CPU gate's first case, under the Triton
    interpreter, with a plain clock instead of do_bench. Its times are not speedups: the result says
    `measured=False`, and no floor applies.

    The timing process gets `budgets.case_timeout_s` for each timed case and stops at `deadline` (a
    `time.monotonic()` instant: the check's own deadline).
    """
    workdir = Path(tempfile.mkdtemp(prefix="ferret-timing-"))
    try:
        cases = _prepare_cases(task, manifest, gate, workdir, device)
        job = _write_job(task, candidate, workdir, cases, compare_compiled, device)
        raw = _run_timing_process(task, gate, workdir, job, as_reporter(progress), deadline)
        if isinstance(raw, str):
            return TimingResult(measured=False, reason=raw)
        return _judge_timings(task, cases, raw, device)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # inputs, pools of answers: hundreds of MB at production shapes


def _timed_records(task: Task, manifest: GateManifest, device: str) -> list:
    contract = task.contract
    if device == "cuda":
        wanted = set(contract.speed.cases) or {c.name for c in contract.cases_for("gpu") if c.kind == "correctness"}
    else:
        wanted = {next(c.name for c in contract.cases_for("cpu") if c.kind == "correctness")}
    return [r for r in manifest.variants if r.case in wanted and r.dtype == contract.primary_dtype]


def _prepare_cases(task: Task, manifest: GateManifest, gate: Path, workdir: Path, device: str) -> list[_Case]:
    """The pool of input sets of every timed case, drawn here and kept here: the timing process runs
    candidate code, which may rewrite the sets it is given, so the judge checks every answer against its copy."""
    contract = task.contract
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    l2_bytes = guards.l2_bytes_of(device)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    profile = "gpu" if device == "cuda" else "cpu"
    cases = []
    for record in _timed_records(task, manifest, device):
        target = workdir / f"{record.id}.safetensors"
        prepare_inputs(contract, gate, record, target)
        inputs = load_file(str(target))
        pool = guards.input_pool(inputs, [n for n in read_only if inputs[n].is_floating_point()],
                                 target_bytes=2 * l2_bytes, generator=generator)
        pool_file = workdir / f"{record.id}.pool.safetensors"
        save_file({wire.pool_key(i, n): t for i, one_set in enumerate(pool) for n, t in one_set.items()}, str(pool_file))
        target.unlink()
        case = next(c for c in contract.cases_for(profile) if c.name == record.case)
        specs = output_specs(contract, case, record.dtype)
        outputs = {n: (list(s), str(d).removeprefix("torch.")) for n, (s, d) in specs.items()}
        cases.append(_Case(wire.TimingCaseJob(record.case, str(pool_file), len(pool), outputs), pool))
    return cases


def _write_job(task: Task, candidate: Path, workdir: Path, cases: list[_Case], compare_compiled: bool,
               device: str) -> wire.TimingJob:
    """The timing process's job. Candidate and baseline are copied in: it sees neither the project's tasks/
    nor the gates (it runs candidate code), and loads the baseline by file, not by module name (a machine may
    have an unrelated top-level `tasks` package installed). A baseline is one self-contained file."""
    contract = task.contract
    shutil.copyfile(candidate, workdir / "candidate.py")
    shutil.copyfile(task.baseline_file, workdir / "baseline.py")
    job = wire.TimingJob(
        candidate=str(workdir / "candidate.py"),
        entry=contract.candidate_abi.entry,
        baseline_file=str(workdir / "baseline.py"),
        baseline_attr=task.baseline.__name__,
        compile_baseline=contract.baseline.compile and compare_compiled and device == "cuda",
        device=device,
        params=dict(contract.params),
        read_only=[i.name for i in contract.inputs if i.role == "in"],
        repeats=contract.speed.repeats,
        cases=[c.job for c in cases],
        result=str(workdir / wire.TIMING_RESULT_FILE),
    )
    job.write(workdir / "job.json")
    return job


def _current_case(workdir: Path) -> int | None:
    """The timed case the timing process last said it started (its sign of progress)."""
    try:
        return int((workdir / wire.CURRENT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _run_timing_process(task: Task, gate: Path, workdir: Path, job: wire.TimingJob, reporter: Reporter,
                        deadline: float | None) -> wire.TimingResults | str:
    """The timing process's results, validated; or why there are none."""
    names = [c.case for c in job.cases]

    def moved(position: object) -> None:
        if isinstance(position, int) and position < len(names):
            reporter.step("timing", position, len(names), names[position])

    reporter(f"timing {len(names)} cases against the baseline ({job.repeats} interleaved rounds)")
    reporter.step("timing", 0, len(names), "starting the timing process")
    outcome = run_isolated(
        [sys.executable, "-m", "ferret.bench.process", "job.json"],
        workdir,
        candidate_environment(workdir, interpret=job.device != "cuda"),
        task.contract.budgets.case_timeout_s,
        task.contract.budgets.candidate_memory_mb,
        hide=hidden_from_candidates(gate, task.project_root),
        finished_marker=workdir / wire.DONE_FILE,
        deadline=deadline,
        progress_token=lambda: _current_case(workdir),
        on_progress=moved,
    )
    reporter.step("timing", len(names), len(names), "done")
    result_file = Path(job.result)
    if not result_file.exists():
        return f"timing process failed: {outcome.kind} {outcome.message} {outcome.stderr_tail[-1500:]}"
    try:
        raw = TypeAdapter(wire.TimingResults).validate_json(result_file.read_text())
    except ValidationError as err:
        return f"the timing process's results do not fit the wire's TimingResults: {str(err)[:500]}"
    if [c.case for c in raw.cases] != names:
        return f"timing process returned cases {[c.case for c in raw.cases]}, not the {names} it was given"
    return raw


def _judge_timings(task: Task, cases: list[_Case], raw: wire.TimingResults, device: str) -> TimingResult:
    """Answers, floor and speedups, computed here from what the judge knows (the device it sees, the shapes
    it drew): the timing process shares its memory with the candidate."""
    contract = task.contract
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    peaks = _peaks_seen_by_judge(device)
    timings = []
    # One result per case, in order: _run_timing_process refused results whose cases differ from the job's.
    for case, result in zip(cases, raw.cases, strict=True):
        checked, wrong = check_timed_answers(task, case.pool, Path(result.answers_file), contract.primary_dtype, read_only)
        timings.append(_case_timing(case, result, checked, wrong, peaks, read_only))
    detections = [
        Detection(cheat=cheat, catalogue=TIMING_CATALOGUE.get(cheat, []), evidence=f"{c.case}: {evidence}", source="timing")
        for c in timings for cheat, _, evidence in (flag.partition(": ") for flag in c.flags)
    ]
    method = METHOD.format(repeats=contract.speed.repeats)
    if device != "cuda":
        return TimingResult(measured=False, reason="guard rehearsal on the CPU: the guards ran, the times are not speedups",
                            device=raw.device, method=method, cases=timings, detections=detections)
    speedups = [c.speedup for c in timings]
    return TimingResult(
        detections=detections,
        review=[f"{c.case}: {r}" for c in timings for r in c.review],
        measured=True,
        device=raw.device,
        method=method,
        cases=timings,
        min_speedup_required=contract.speed.min_speedup,
        target_met=bool(speedups) and min(speedups) >= contract.speed.min_speedup,
        geomean_speedup=statistics.geometric_mean(speedups) if speedups else None,
    )


def _case_timing(case: _Case, result: wire.TimingCaseResult, checked: int, wrong: list[str], peaks: dict | None,
                 read_only: list[str]) -> CaseTiming:
    speedup = result.baseline_ms / result.candidate_ms
    flags = list(result.flags) + wrong
    review = ([f"speedup {speedup:.1f}x over the baseline is above {guards.SUSPICIOUS_SPEEDUP:g}x: look at it"]
              if speedup > guards.SUSPICIOUS_SPEEDUP else [])
    floor = None
    if peaks is not None:
        shapes = {
            n: torch.empty(shape, dtype=getattr(torch, dtype), device="meta") for n, (shape, dtype) in case.job.outputs.items()
        }
        min_bytes = guards.minimum_bytes(case.pool[0], shapes, read_only)
        floor = guards.floor_ms(min_bytes, 0.0, peaks)
        if result.candidate_ms < guards.FLOOR_MARGIN * floor:
            flags.append(
                f"impossible_speed: {result.candidate_ms * 1e3:.2f} us is under {guards.FLOOR_MARGIN:g} x the "
                f"{floor * 1e3:.2f} us floor ({min_bytes} bytes at the datasheet {peaks['bytes_per_s'] / 1e12:g} TB/s)")
    return CaseTiming(
        case=result.case, candidate_ms=result.candidate_ms, baseline_ms=result.baseline_ms,
        baseline_compiled_ms=result.baseline_compiled_ms, speedup=speedup,
        speedup_vs_compiled=(result.baseline_compiled_ms / result.candidate_ms) if result.baseline_compiled_ms else None,
        samples=result.samples, compile_error=result.compile_error, wall_ms=result.wall_ms, floor_ms=floor,
        pool_sets=result.pool_sets, persisting_l2=result.persisting_l2, answers_checked=checked, flags=flags, review=review,
    )


def _peaks_seen_by_judge(device: str) -> dict | None:
    """The datasheet peaks of the GPU this (the judge's) process sees; None on the CPU or an unlisted GPU."""
    return guards.peaks_for(torch.cuda.get_device_name(0)) if device == "cuda" and torch.cuda.is_available() else None

