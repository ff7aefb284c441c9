"""The judge's side of timing: it draws the input pool, starts the two timing processes
(`ferret.bench.process`: the candidate's timer, and the reference timer that never loads candidate code),
conducts their interleaved rounds (`ferret.gate.interleave`), and checks everything that comes back: the
answers of the timed calls against the reference, the rounds' agreement, the roofline floor, the speedups.
The candidate's timer shares its memory with the candidate, so nothing it computes about right answers or
limits is trusted."""

from __future__ import annotations

import hashlib
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
from ferret.backends import cuda
from ferret.bench import guards
from ferret.contract.roofline import RooflineCount, count_roofline
from ferret.contract.task import Task
from ferret.errors import ContractError
from ferret.gate.answers import check_timed_answers
from ferret.gate.inputs import output_specs, prepare_inputs
from ferret.gate.interleave import TimerFailed, TimerProcess, conduct, start_timer, stop_all, wait_until_done
from ferret.gate.isolation import hidden_from_candidates
from ferret.gate.lock import project_module_files
from ferret.gate.models import CaseTiming, Detection, GateManifest, RooflineWork, TimingResult
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.sandbox.launch import candidate_environment

TIMING_CATALOGUE = {"side_stream_or_thread": [13], "cross_call_caching": [16, 17], "impossible_speed": [19, 18],
                    "harness_patching": [15], "warmup_detection": [17, 16], "input_mutation": [3]}

METHOD = (
    "two timing processes, interleaved round by round by the judge with one on the GPU at a time: the "
    "candidate's, and a reference process that never loads candidate code (baseline, torch.compile; the "
    "candidate's process stopped while it runs, an interference probe around each of its rounds). Each call: "
    "L2 flushed (persisting L2 reset), the flush and a spin kernel holding the GPU for 1.5x the call's host "
    "launch time, then CUDA events around the call (a reference call that synchronizes with the host, where no "
    "spin can queue its launches ahead: its kernels' device time from torch.profiler, the flush taken off); "
    "median of ~100 ms of calls (at most 300) per round over a rotating pool of "
    "re-randomized input sets larger than 2x L2; median over {repeats} rounds, a case unstable when its rounds "
    "spread more than {spread:.0%}; then synchronized wall time, every output fingerprinted and re-checked "
    "against a synchronous call, every timed answer checked by the judge against the reference, and the "
    "roofline floor (datasheet peaks)"
)


@dataclass
class _Case:
    """One timed case as the judge prepared it: its job, the judge's own copy of its input pool, and the least
    work any correct kernel does on it (the roofline count, from the judge's own copy of the inputs)."""

    job: wire.TimingCaseJob
    pool: list[dict[str, torch.Tensor]]
    roofline: RooflineCount


@dataclass
class StartedTiming:
    """Both timing processes, started and warming up (loading, compiling, the first case's warm-up), waiting for
    the judge's first step; the cases whose pools the judge drew for them. Started beside the candidate's
    correctness run (`start_timing`), conducted once the candidate is known correct (`finish_timing`), or
    stopped (`stop`). Nothing is timed before `finish_timing`: every timed step runs one process at a time."""

    workdir: Path
    cases: list[_Case]
    timers: list[TimerProcess]
    reference_files: dict[Path, str]

    def stop(self) -> None:
        """Kill both processes (if running) and delete their folder: inputs, pools, answers (hundreds of MB)."""
        stop_all(self.timers)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_timing(task: Task, manifest: GateManifest, gate: Path, candidate: Path, progress: ProgressLike = None,
                 compare_compiled: bool = True, device: str = "cuda", deadline: float | None = None) -> StartedTiming:
    """Draw the timed cases' input pools and start both timing processes; returns at once. They load, compile
    and warm up while the judge does other work (the candidate's correctness run), then wait for its steps.
    The caller owns the result: `finish_timing` or `StartedTiming.stop`. ContractError when the roofline is
    shown wrong on the drawn inputs."""
    workdir = Path(tempfile.mkdtemp(prefix="ferret-timing-"))
    timers: list[TimerProcess] = []
    try:
        cases = _prepare_cases(task, manifest, gate, workdir, device)
        timers, reference_files = _make_timers(task, gate, candidate, workdir, cases, compare_compiled, device)
        for timer in timers:
            start_timer(timer, task.contract.budgets.case_timeout_s, task.contract.budgets.candidate_memory_mb, deadline)
    except BaseException:
        stop_all(timers)  # one already started would otherwise wait for a judge that has gone
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    as_reporter(progress)(f"timing processes started for {len(cases)} cases; they warm up beside the candidate's run")
    return StartedTiming(workdir, cases, timers, reference_files)


def finish_timing(task: Task, started: StartedTiming, progress: ProgressLike = None, device: str = "cuda") -> TimingResult:
    """Conduct the started processes' interleaved rounds and judge what they send back; stops them and deletes
    their folder in every case."""
    try:
        raw = _run_timers(task, started.timers, [c.job.case for c in started.cases], as_reporter(progress))
        if isinstance(raw, str):
            return TimingResult(measured=False, reason=raw)
        changed = [str(f.relative_to(started.workdir)) for f, digest in started.reference_files.items()
                   if _sha256(f) != digest]
        if changed:
            return TimingResult(measured=False, reason=f"the reference timer's files were changed while it ran: {changed}")
        result = _judge_timings(task, started.cases, raw[0], raw[1], device)
        result.process_seconds = raw[2]
        return result
    finally:
        started.stop()


def time_candidate(task: Task, manifest: GateManifest, gate: Path, candidate: Path, progress: ProgressLike = None,
                   compare_compiled: bool = True, device: str = "cuda", deadline: float | None = None) -> TimingResult:
    """Time a correct candidate against the baseline: `start_timing` then `finish_timing`, nothing between. torch.compile
    of the baseline is timed beside them when the contract asks and `compare_compiled`.

    `device="cpu"` is a rehearsal of the guards for tests (the judge never asks for it): the same processes,
    step protocol, pool, output slots, fingerprints and timed-answers check on a CPU gate's first case, under
    the Triton interpreter, with a plain clock. Its times are not speedups: the result says `measured=False`,
    and no floor applies.

    Each timing process gets `budgets.case_timeout_s` between two of its steps, counted from the judge's first
    step, and stops at `deadline` (a `time.monotonic()` instant: the check's own deadline). ContractError when
    the roofline is shown wrong: a baseline timed under its floor."""
    started = start_timing(task, manifest, gate, candidate, progress, compare_compiled, device, deadline)
    return finish_timing(task, started, progress, device)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def _timed_records(task: Task, manifest: GateManifest, device: str) -> list:
    contract = task.contract
    if device == "cuda":
        wanted = set(contract.speed.cases) or {c.name for c in contract.cases_for("gpu") if c.kind == "correctness"}
    else:
        wanted = {next(c.name for c in contract.cases_for("cpu") if c.kind == "correctness")}
    return [r for r in manifest.variants if r.case in wanted and r.dtype == contract.primary_dtype]


def _prepare_cases(task: Task, manifest: GateManifest, gate: Path, workdir: Path, device: str) -> list[_Case]:
    """The pool of input sets of every timed case, drawn here and kept here: the candidate's timer runs
    candidate code, which may rewrite the sets it is given, so the judge checks every answer against its copy."""
    contract = task.contract
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    l2_bytes = guards.l2_bytes_of(device)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    profile = "gpu" if device == "cuda" else "cpu"
    (workdir / "pools").mkdir()
    cases = []
    for record in _timed_records(task, manifest, device):
        target = workdir / f"{record.id}.safetensors"
        prepare_inputs(contract, gate, record, target)
        inputs = load_file(str(target))
        target.unlink()
        case = next(c for c in contract.cases_for(profile) if c.name == record.case)
        try:
            roofline = count_roofline(contract, case.dims, inputs, record.dtype)
        except ContractError as err:
            raise ContractError(f"{task.path}: {err}") from None
        pool = guards.input_pool(inputs, [n for n in read_only if inputs[n].is_floating_point()],
                                 target_bytes=2 * l2_bytes, generator=generator)
        pool_file = workdir / "pools" / f"{record.id}.pool.safetensors"
        save_file({wire.pool_key(i, n): t for i, one_set in enumerate(pool) for n, t in one_set.items()}, str(pool_file))
        specs = output_specs(contract, case, record.dtype)
        outputs = {n: (list(s), str(d).removeprefix("torch.")) for n, (s, d) in specs.items()}
        cases.append(_Case(wire.TimingCaseJob(record.case, str(pool_file), len(pool), outputs), pool, roofline))
    return cases


def _make_timers(task: Task, gate: Path, candidate: Path, workdir: Path, cases: list[_Case], compare_compiled: bool,
                 device: str) -> tuple[list[TimerProcess], dict[Path, str]]:
    """The two timing processes' folders and jobs: the candidate's timer gets a copy of the candidate and
    nothing else, the reference timer a copy of the baseline and of the project modules it imports
    (`_copy_baseline`). Each gets its own copy of the pools. Returns the timers (candidate's first) and the
    reference timer's files with their digests."""
    contract = task.contract
    hidden = hidden_from_candidates(gate, task.project_root)
    roles = {
        wire.CANDIDATE_TIMER: (candidate, contract.candidate_abi.entry, False),
        wire.REFERENCE_TIMER: (task.baseline_file, task.baseline.__name__,
                               contract.baseline.compile and compare_compiled and device == "cuda"),
    }
    timers, reference_copies = [], []
    for role, (source, entry, compile_it) in roles.items():
        folder = workdir / role
        folder.mkdir()
        import_root, module = "", ""
        if role == wire.REFERENCE_TIMER:
            loaded, root, reference_copies = _copy_baseline(task, folder)
            if root is not None:  # imported as the contract names it, `module:attr`
                module, _, entry = task.contract.baseline.entry.partition(":")
                import_root = str(root)
        else:
            loaded = folder / "source.py"
            shutil.copyfile(source, loaded)
        case_jobs = []
        for case in cases:
            own_pool = folder / Path(case.job.pool_file).name
            if role == wire.REFERENCE_TIMER:
                os.link(case.job.pool_file, own_pool)  # the judge's own file: no candidate process sees it
            else:
                shutil.copyfile(case.job.pool_file, own_pool)  # a copy the candidate may rewrite; the judge checks its own
            case_jobs.append(wire.TimingCaseJob(case.job.case, str(own_pool), case.job.pool_sets, case.job.outputs))
        job = wire.TimingJob(
            role=role, source=str(loaded), entry=entry, compile=bool(compile_it), device=device,
            params=dict(contract.params), read_only=[i.name for i in contract.inputs if i.role == "in"],
            repeats=contract.speed.repeats, cases=case_jobs, result=str(folder / wire.TIMING_RESULT_FILE),
            import_root=import_root, module=module,
        )
        job.write(folder / "job.json")
        args = [sys.executable, "-m", "ferret.bench.process", "job.json"]
        env = candidate_environment(folder, interpret=device != "cuda", runs_candidate=role == wire.CANDIDATE_TIMER,
                                    cuda_flags=cuda.flags_from_contract(contract.backend.compile_flags))
        if role == wire.REFERENCE_TIMER:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(_compile_cache(gate))
        # The candidate's process sees neither the gates (nor the compile cache beside them) nor the reference
        # timer's folder; the reference timer runs only the project's own baseline, and keeps its compile cache.
        hide = [*hidden, workdir / wire.REFERENCE_TIMER] if role == wire.CANDIDATE_TIMER else []
        timers.append(TimerProcess(role, folder, args, env, hide))
    files = {f: _sha256(f) for f in (*reference_copies, timers[1].folder / "job.json")}
    return timers, files


def _copy_baseline(task: Task, folder: Path) -> tuple[Path, Path | None, list[Path]]:
    """The reference timer's copy of the baseline: its module, the project-local modules it imports and their
    packages (the files the gate's lock covers for it), in their folders under `folder/project`, imported with
    that folder first on the path, so an unrelated `tasks` package installed on the machine is never the one
    loaded. A baseline outside the project is copied as its one file. Returns the file to load, the import
    root (None for one file) and every file copied."""
    root = task.project_root.resolve()
    baseline = task.baseline_file.resolve()
    files = project_module_files([task.contract.baseline.entry.partition(":")[0]], root)
    if baseline not in files:
        target = folder / "source.py"
        shutil.copyfile(baseline, target)
        return target, None, [target]
    tree = folder / "project"
    copies = [tree / path.relative_to(root) for path in files]
    for path, copy in zip(files, copies, strict=True):
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    return tree / baseline.relative_to(root), tree, copies


def _compile_cache(gate: Path) -> Path:
    """Where the reference timer keeps torch.compile's cache between checks: in the gates folder (never shown
    to a candidate's process), beside the gates, so recompiling the baseline does not cost every check."""
    folder = gate.parent / ".cache" / "inductor"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run_timers(task: Task, timers: list[TimerProcess], names: list[str], reporter: Reporter
                ) -> tuple[wire.TimingResults, wire.TimingResults, dict[str, float]] | str:
    """Both started timing processes conducted to the end; their results, validated, and where their time
    went; or why there are none."""
    repeats = task.contract.speed.repeats
    reporter(f"timing {len(names)} cases against the baseline ({repeats} interleaved rounds, two processes)")
    reporter.step("timing", 0, len(names), "waiting for the timing processes to warm up")

    def moved(case: int, what: str) -> None:
        label = "checking its timed calls" if what == "post" else f"round {int(what) + 1}/{repeats}"
        reporter.step("timing", case, len(names), f"{names[case]}: {label}")

    for timer in timers:
        timer.conducted.set()  # from now on a step must follow another within budgets.case_timeout_s
    try:
        seconds = conduct(timers, len(names), repeats, on_step=moved)
        wait_until_done(timers)
    except TimerFailed as failed:
        stop_all(timers)
        outcome = failed.timer.outcome
        detail = f"{outcome.kind} {outcome.message} {outcome.stderr_tail[-1500:]}" if outcome else "no outcome"
        return f"the {failed.timer.role} timing process failed before step {failed.waited_for!r}: {detail}"
    except BaseException:
        stop_all(timers)
        raise
    reporter.step("timing", len(names), len(names), "done")
    results = [_read_results(timer, names) for timer in timers]
    problems = [r for r in results if isinstance(r, str)]
    if problems:
        return "; ".join(str(p) for p in problems)
    candidate_results, reference_results = results
    assert not isinstance(candidate_results, str) and not isinstance(reference_results, str)
    return candidate_results, reference_results, seconds


def _read_results(timer: TimerProcess, names: list[str]) -> wire.TimingResults | str:
    result_file = timer.folder / wire.TIMING_RESULT_FILE
    outcome = timer.outcome
    if not result_file.exists():
        detail = f"{outcome.kind} {outcome.message} {outcome.stderr_tail[-1500:]}" if outcome else "no outcome"
        return f"the {timer.role} timing process failed: {detail}"
    try:
        raw = TypeAdapter(wire.TimingResults).validate_json(result_file.read_text())
    except ValidationError as err:
        return f"the {timer.role} timing process's results do not fit the wire's TimingResults: {str(err)[:500]}"
    if [c.case for c in raw.cases] != names:
        return f"the {timer.role} timing process returned cases {[c.case for c in raw.cases]}, not the {names} it was given"
    return raw


def _judge_timings(task: Task, cases: list[_Case], candidate: wire.TimingResults, reference: wire.TimingResults,
                   device: str) -> TimingResult:
    """Answers, rounds, floor and speedups, computed here from what the judge knows (the device it sees, the
    inputs it drew): the candidate's timer shares its memory with the candidate."""
    contract = task.contract
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    peaks = _peaks_seen_by_judge(device)
    timings = []
    # One result per case, in order: _read_results refused results whose cases differ from the job's.
    for case, mine, theirs in zip(cases, candidate.cases, reference.cases, strict=True):
        if mine.answers_file is None:
            checked, wrong = 0, ["cross_call_caching: the candidate's timer sent back no answers of its timed calls"]
        else:
            checked, wrong = check_timed_answers(task, case.pool, Path(mine.answers_file), contract.primary_dtype, read_only)
        timing = _case_timing(case, mine, theirs, checked, wrong, peaks, contract.speed.max_round_spread)
        _check_roofline(task, timing)
        timings.append(timing)
    detections = [
        Detection(cheat=cheat, catalogue=TIMING_CATALOGUE.get(cheat, []), evidence=f"{c.case}: {evidence}", source="timing")
        for c in timings for cheat, _, evidence in (flag.partition(": ") for flag in c.flags)
    ]
    method = METHOD.format(repeats=contract.speed.repeats, spread=contract.speed.max_round_spread)
    if device != "cuda":
        return TimingResult(measured=False, reason="guard rehearsal on the CPU: the guards ran, the times are not speedups",
                            device=candidate.device, method=method, cases=timings, detections=detections)
    return _measured_result(task, candidate.device, method, timings, detections)


def _measured_result(task: Task, device_name: str, method: str, timings: list[CaseTiming],
                     detections: list[Detection]) -> TimingResult:
    """The speed verdict: only stable cases count toward the target; an unstable one never helps a candidate."""
    contract = task.contract
    stable = [c for c in timings if not c.unstable]
    speedups = [c.speedup for c in stable]
    unstable = [c.case for c in timings if c.unstable]
    return TimingResult(
        detections=detections,
        review=[f"{c.case}: {r}" for c in timings for r in c.review],
        measured=True,
        device=device_name,
        method=method,
        cases=timings,
        min_speedup_required=contract.speed.min_speedup,
        target_met=bool(speedups) and not unstable and min(speedups) >= contract.speed.min_speedup,
        geomean_speedup=statistics.geometric_mean(speedups) if speedups else None,
        unstable_cases=unstable,
        roofline_source=timings[0].roofline.source if timings and timings[0].roofline else None,
    )


def _kept_rounds(samples: dict[str, list[float]], interfered: list[int]) -> dict[str, list[float]]:
    return {name: [t for r, t in enumerate(times) if r not in interfered] for name, times in samples.items()}


def _spread(times: list[float]) -> float:
    """(slowest - fastest) / median of the rounds' times: how far the rounds disagree."""
    return (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else 0.0


MOSTLY_LATE = 0.5  # a round with more of its calls late than this was measured by the host, not the GPU


def _late_round_reasons(late_fraction: dict[str, list[float]]) -> list[str]:
    """Rounds whose median is the host's: most of their calls late even after the clock's longer spins."""
    reasons = []
    for name, fractions in late_fraction.items():
        rounds = [index for index, fraction in enumerate(fractions) if fraction > MOSTLY_LATE]
        if rounds:
            reasons.append(f"{name}'s rounds {rounds} were mostly late calls (the host fell behind the GPU's spin; "
                           f"late fractions {fractions})")
    return reasons


def _case_timing(case: _Case, mine: wire.TimingCaseResult, theirs: wire.TimingCaseResult, checked: int,
                 wrong: list[str], peaks: dict | None, max_spread: float) -> CaseTiming:
    interfered = guards.interfered_rounds(theirs.probes_ms)
    rounds = _kept_rounds({**theirs.samples, **mine.samples}, interfered)
    if not rounds.get("candidate") or not rounds.get("baseline"):
        rounds = {**theirs.samples, **mine.samples}  # every round interfered: kept for the record, never counted
    med = {name: statistics.median(times) for name, times in rounds.items() if times}
    spreads = {name: _spread(times) for name, times in rounds.items() if times}
    reasons = [f"{name}'s rounds spread {value:.1%}, more than the contract's {max_spread:.0%}"
               for name, value in spreads.items() if value > max_spread]
    reasons += _late_round_reasons({**theirs.late_fraction, **mine.late_fraction})
    if interfered:
        probes = ", ".join(f"{1e3 * ms:.1f}" for ms in theirs.probes_ms)
        reasons.append(f"the GPU was shared during reference rounds {interfered} (interference probe, us before and "
                       f"after each round: {probes}; over {guards.INTERFERENCE_TOLERANCE:g}x the fastest)")
    candidate_ms, baseline_ms = med["candidate"], med["baseline"]
    compiled_ms = med.get("baseline_compiled")
    speedup = baseline_ms / candidate_ms
    review = ([f"speedup {speedup:.1f}x over the baseline is above {guards.SUSPICIOUS_SPEEDUP:g}x: look at it"]
              if speedup > guards.SUSPICIOUS_SPEEDUP else [])
    timing = CaseTiming(
        case=mine.case, candidate_ms=candidate_ms, baseline_ms=baseline_ms, baseline_compiled_ms=compiled_ms,
        speedup=speedup, speedup_vs_compiled=(compiled_ms / candidate_ms) if compiled_ms else None,
        samples={**theirs.samples, **mine.samples}, round_spread=spreads, unstable=bool(reasons),
        unstable_reason="; ".join(reasons) or None, interfered_rounds=interfered, host_ms={**theirs.host_ms, **mine.host_ms},
        late_fraction={**theirs.late_fraction, **mine.late_fraction},
        compile_error=theirs.compile_error, wall_ms=mine.wall_ms, pool_sets=mine.pool_sets,
        persisting_l2=mine.persisting_l2, answers_checked=checked, flags=list(mine.flags) + wrong, review=review,
        kernels=dict(list(mine.kernels.items())[:20]),
        process_seconds={**{f"reference:{k}": v for k, v in theirs.seconds.items()},
                         **{f"candidate:{k}": v for k, v in mine.seconds.items()}},
        roofline=RooflineWork(bytes=case.roofline.bytes, flops=case.roofline.flops, source=case.roofline.source,
                          explanation=case.roofline.explanation),
    )
    if peaks is not None:
        _place_on_roofline(timing, case.roofline, peaks)
    return timing


def _place_on_roofline(timing: CaseTiming, count: RooflineCount, peaks: dict) -> None:
    """The floor (the larger of bytes / datasheet bandwidth and flops / datasheet bf16 rate), where the
    candidate stands against it, and the impossible-speed guard."""
    floor = guards.floor_ms(count.bytes, count.flops, peaks)
    seconds = timing.candidate_ms * 1e-3
    timing.floor_ms = floor
    timing.fraction_of_floor = floor / timing.candidate_ms
    timing.achieved_tb_per_s = count.bytes / seconds / 1e12
    timing.achieved_tflop_per_s = count.flops / seconds / 1e12
    timing.baseline_fraction_of_floor = floor / timing.baseline_ms
    if timing.candidate_ms < guards.FLOOR_MARGIN * floor:
        timing.flags.append(
            f"impossible_speed: {timing.candidate_ms * 1e3:.2f} us is under {guards.FLOOR_MARGIN:g} x the "
            f"{floor * 1e3:.2f} us floor ({count.bytes:,} bytes at the datasheet {peaks['bytes_per_s'] / 1e12:g} TB/s, "
            f"{count.flops:,} flops at {peaks['flops_per_s'] / 1e12:g} TFLOP/s; {count.source} roofline)")


def _check_roofline(task: Task, timing: CaseTiming) -> None:
    """The sanity rule of the roofline: the baseline and torch.compile are honest, so one of them under the
    floor means the contract's roofline is wrong; that is the contract's error, not a cheat to report."""
    if timing.floor_ms is None:
        return
    for name, ms in (("the eager baseline", timing.baseline_ms), ("torch.compile of the baseline", timing.baseline_compiled_ms)):
        if ms is not None and ms < guards.FLOOR_MARGIN * timing.floor_ms:
            raise ContractError(
                f"{task.path}: roofline: {name} took {ms * 1e3:.2f} us on {timing.case}, under {guards.FLOOR_MARGIN:g} x "
                f"its {timing.floor_ms * 1e3:.2f} us floor: the roofline counts more work than the case needs "
                f"({timing.roofline.explanation if timing.roofline else ''})")


def _peaks_seen_by_judge(device: str) -> dict | None:
    """The datasheet peaks of the GPU this (the judge's) process sees; None on the CPU or an unlisted GPU."""
    return guards.peaks_for(torch.cuda.get_device_name(0)) if device == "cuda" and torch.cuda.is_available() else None


def speed_lines(timing: TimingResult) -> list[str]:
    """What a person reads of a timing result at the end of a check: why speed was not measured (a process's
    traceback cut to its first line and its exception), or each case's time, speedups and fraction of the floor,
    then the target."""
    if not timing.measured:
        lines = [line for line in timing.reason.strip().splitlines() if line.strip()]
        said = lines[0] if len(lines) <= 1 else f"{lines[0][:200]} ... {lines[-1].strip()[:200]}"
        return [f"speed not measured: {said}"]
    shown = [_case_speed_line(case) for case in timing.cases]
    target = "none set" if timing.min_speedup_required is None else (
        f"{timing.min_speedup_required}x " + ("met" if timing.target_met else "NOT met"))
    geomean = "none stable" if timing.geomean_speedup is None else f"{timing.geomean_speedup:.2f}x"
    return [*shown, f"speed: geomean {geomean} over the baseline, target {target}"
            + (f"; unstable (not counted): {', '.join(timing.unstable_cases)}" if timing.unstable_cases else "")]


def _case_speed_line(case: CaseTiming) -> str:
    parts = [f"{case.candidate_ms * 1e3:.1f} us", f"{case.speedup:.2f}x baseline"]
    if case.speedup_vs_compiled is not None:
        parts.append(f"{case.speedup_vs_compiled:.2f}x torch.compile")
    if case.fraction_of_floor is not None:
        parts.append(f"{case.fraction_of_floor:.1%} of the floor")
    if case.unstable:
        parts.append(f"UNSTABLE ({case.unstable_reason or 'rounds disagree'})")
    return f"  speed {case.case}: " + ", ".join(parts)
