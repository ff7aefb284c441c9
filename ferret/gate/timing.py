"""The judge's side of timing: it draws the input pool, starts the timing processes
(`ferret.bench.process`: the candidate's timer, and reference timers that never load candidate code),
conducts their interleaved rounds (`ferret.gate.interleave`), and checks everything that comes back: the
answers of the timed calls against the reference, the rounds' agreement, the roofline floor, the speedups.
The candidate's timer shares its memory with the candidate, so nothing it computes about right answers or
limits is trusted."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import TypeAdapter, ValidationError
from safetensors.torch import load, save_file

from ferret import wire
from ferret.bench import guards
from ferret.bench.warmup_turn import timing_job_key
from ferret.contract.model import Case, Contract
from ferret.contract.roofline import RooflineCount, count_roofline
from ferret.contract.task import Task
from ferret.errors import ContractError
from ferret.gate.answers import SAMPLED_AT_LEAST, check_timed_answers
from ferret.gate.compile_choice import (
    COMPILE_TRIALS,
    CompileChoice,
    compile_choice_for,
    compiled_geomean_ms,
    fastest_trial,
)
from ferret.gate.context import GateContext
from ferret.gate.gpu_turns import GpuTurns
from ferret.gate.inputs import CheckedInputs, draw_inputs, input_bytes, output_specs
from ferret.gate.interleave import (
    TimerFailed,
    TimerProcess,
    conduct,
    rounds_in_turn,
    start_timer,
    stop_all,
    wait_until_done,
)
from ferret.gate.isolation import hidden_from_candidates
from ferret.gate.lock import project_module_files
from ferret.gate.models import CaseTiming, Detection, RooflineWork, TimingResult, VariantRecord
from ferret.gate.serving import NOT_MEASURED_ON_CPU, judge_serving, replay_checker, serving_speedups
from ferret.gate.sm_clock import RoundClocks
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.sandbox.launch import candidate_environment, candidate_file_name, candidate_settings, process_view
from ferret.sandbox.view import FolderView

TIMING_CATALOGUE = {
    "side_stream_or_thread": [13],
    "cross_call_caching": [16, 17],
    "impossible_speed": [19, 18],
    "harness_patching": [15],
    "warmup_detection": [17, 16],
    "input_mutation": [3],
    "library_call": [9],
    "write_outside_outputs": [23],
    "output_relabelled": [28],
    "content_replay": [22, 16],
    "host_numerics": [31],
    "graph_frozen": [32],
}

METHOD = (
    "timing processes interleaved round by round by the judge with one on the GPU at a time: the candidate's "
    "(its code loaded as several copies, called in turn), and reference processes that never load candidate code "
    "(baseline, torch.compile), each role's processes taking the rounds in turn (the candidate's processes stopped "
    "while another runs, an interference probe around each reference round). Each call: "
    "L2 flushed (persisting L2 reset), the flush and a spin kernel holding the GPU for 1.5x the call's host "
    "launch time, then CUDA events around the call (a reference call that synchronizes with the host, where no "
    "spin can queue its launches ahead: its kernels' device time from torch.profiler, the flush taken off); "
    "median of ~100 ms of calls (at most 300) per round over a rotating pool of "
    "re-randomized input sets larger than 2x L2; over {repeats} rounds, an implementation's time the mean "
    "over its processes of each one's median over its rounds, a case unstable when its rounds (inside one process) "
    "spread more than {spread:.0%}; then synchronized wall time, every output fingerprinted and re-checked "
    "against a synchronous call, every timed answer checked by the judge against the reference, and the "
    "roofline floor (datasheet peaks). Serving timing: each implementation's call captured in a CUDA graph and "
    "replayed on sets copied into the captured buffers (the judge's fresh draws, then pool sets; every candidate "
    "replay's answer checked), the median replay with the copy and an L2 flush outside the events, and the "
    "synchronized wall time per plain call (eager, host work included)"
)


@dataclass
class _Case:
    """One timed case as the judge prepared it: its job, the judge's own copy of its input pool, and the least
    work any correct kernel does on it (the roofline count, from the judge's own copy of the inputs)."""

    job: wire.TimingCaseJob
    pool: list[dict[str, torch.Tensor]]
    roofline: RooflineCount
    fresh: list[dict[str, torch.Tensor]] = field(default_factory=list)  # whole fresh draws for graph replay (GPU)


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
        """Kill every timing process (if running) and delete their folder: inputs, pools, answers (hundreds of MB)."""
        stop_all(self.timers)
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class TimingOptions:
    """How a candidate is timed. `compare_compiled`: torch.compile of the baseline timed beside it where the
    contract asks. `device`: cuda, or cpu for a rehearsal of the guards (`time_candidate`). `deadline`: the check's
    (a `time.monotonic()` instant). `checked`: the check's memo of inputs checked against the lock
    (`ferret.gate.inputs.CheckedInputs`), shared with the candidate's folder. `gpu_quiet`: set by the caller once
    nothing else of the check uses the GPU (`start_timing`)."""

    progress: ProgressLike = None
    compare_compiled: bool = True
    device: str = "cuda"
    deadline: float | None = None
    checked: CheckedInputs | None = None
    gpu_quiet: threading.Event | None = None


def start_timing(context: GateContext, candidate: Path, options: TimingOptions = TimingOptions()) -> StartedTiming:
    """Draw the timed cases' input pools and start the timing processes; returns at once. They load, compile
    and warm up while the judge does other work (the candidate's correctness run), then wait for its steps.
    The caller owns the result: `finish_timing` or `StartedTiming.stop`. ContractError when the roofline is
    shown wrong on the drawn inputs. A compile choice (`ferret.gate.compile_choice`) times its trials only once
    `options.gpu_quiet` is set, so the returns wait for it where the gate's compile cache holds no choice yet."""
    task, gate, device, deadline = context.task, context.gate, options.device, options.deadline
    workdir = Path(tempfile.mkdtemp())  # a plain name: the candidate's timers see their folder's path
    timers: list[TimerProcess] = []
    try:
        cases = _prepare_cases(context, workdir, device, options.checked)
        timers, reference_files = _make_timers(task, gate, candidate, workdir, cases, options.compare_compiled, device)
        _use_chosen_compile_cache(
            task, gate, workdir, cases, timers, device, deadline, as_reporter(options.progress), options.gpu_quiet
        )
        for timer in timers:
            start_timer(timer, task.contract.budgets.case_timeout_s, task.contract.budgets.candidate_memory_mb, deadline)
    except BaseException:
        stop_all(timers)  # one already started would otherwise wait for a judge that has gone
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    as_reporter(options.progress)(f"timing processes started for {len(cases)} cases; they warm up beside the candidate's run")
    return StartedTiming(workdir, cases, timers, reference_files)


def finish_timing(task: Task, started: StartedTiming, progress: ProgressLike = None, device: str = "cuda") -> TimingResult:
    """Conduct the started processes' interleaved rounds and judge what they send back; stops them and deletes
    their folder in every case. On the GPU its caller holds the GPU alone around it (`gpu_alone`), so that the wait
    for other checks is not counted as the rounds' time."""
    try:
        clocks = RoundClocks.of_torch_gpu() if device == "cuda" else None  # None without NVML
        raw = _run_timers(task, started.timers, [c.job.case for c in started.cases], as_reporter(progress), clocks)
        if isinstance(raw, str):
            return TimingResult(measured=False, reason=raw)
        changed = [str(f.relative_to(started.workdir)) for f, digest in started.reference_files.items() if _sha256(f) != digest]
        if changed:
            return TimingResult(measured=False, reason=f"the reference timer's files were changed while it ran: {changed}")
        result = _judge_timings(task, started.cases, raw[0], raw[1], device, clocks)
        result.process_seconds = raw[2]
        return result
    finally:
        started.stop()


@contextmanager
def gpu_alone(device: str, progress: ProgressLike = None) -> Iterator[float]:
    """The GPU held alone among ferret's checks (ferret/gate/gpu_turns.py) for `finish_timing`'s rounds. Yields the
    seconds waited for it: 0 for the CPU rehearsal, which needs no turn."""
    if device != "cuda":
        yield 0.0
        return
    with GpuTurns.for_this_process().alone() as waited:
        if waited > 1.0:
            as_reporter(progress)(f"timing waited {waited:.1f} s for other checks' GPU work to end (the GPU is timed alone)")
        yield waited


def time_candidate(context: GateContext, candidate: Path, options: TimingOptions = TimingOptions()) -> TimingResult:
    """Time a correct candidate against the baseline: `start_timing` then `finish_timing`, nothing between. torch.compile
    of the baseline is timed beside them when the contract asks and `compare_compiled`.

    `device="cpu"` is a rehearsal of the guards for tests (the judge never asks for it): the same processes,
    step protocol, pool, output slots, fingerprints and timed-answers check on a CPU gate's first case, under
    the Triton interpreter, with a plain clock. Its times are not speedups: the result says `measured=False`,
    and no floor applies.

    Each timing process gets `budgets.case_timeout_s` between two of its steps, counted from the judge's first
    step, and stops at `deadline` (a `time.monotonic()` instant: the check's own deadline). ContractError when
    the roofline is shown wrong: a baseline timed under its floor."""
    started = start_timing(context, candidate, options)
    with gpu_alone(options.device, options.progress):
        return finish_timing(context.task, started, options.progress, options.device)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def _timed_records(context: GateContext, device: str) -> list:
    contract, manifest = context.contract, context.manifest
    if device == "cuda":
        wanted = set(contract.speed.cases) or {c.name for c in contract.cases_for("gpu") if c.kind == "correctness"}
    else:
        wanted = {next(c.name for c in contract.cases_for("cpu") if c.kind == "correctness")}
    return [r for r in manifest.variants if r.case in wanted and r.dtype == contract.primary_dtype]


def _prepare_cases(context: GateContext, workdir: Path, device: str, checked: CheckedInputs | None = None) -> list[_Case]:
    """The pool of input sets of every timed case, drawn here and kept here: the candidate's timer runs
    candidate code, which may rewrite the sets it is given, so the judge checks every answer against its copy.
    Each case's inputs are read from their checked bytes, never from a file written on the way."""
    task, contract, gate = context.task, context.contract, context.gate
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    l2_bytes = guards.l2_bytes_of(device)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    profile = "gpu" if device == "cuda" else "cpu"
    (workdir / "pools").mkdir()
    cases = []
    for record in _timed_records(context, device):
        inputs = load(input_bytes(contract, gate, record, checked))
        case = next(c for c in contract.cases_for(profile) if c.name == record.case)
        try:
            roofline = count_roofline(contract, case.dims, inputs, record.dtype)
        except ContractError as err:
            raise ContractError(f"{task.path}: {err}") from None
        pool = guards.input_pool(
            inputs, [n for n in read_only if inputs[n].is_floating_point()], target_bytes=2 * l2_bytes, generator=generator
        )
        pool_file = workdir / "pools" / f"{record.id}.pool.safetensors"
        save_file({wire.pool_key(i, n): t for i, one_set in enumerate(pool) for n, t in one_set.items()}, str(pool_file))
        specs = output_specs(contract, case, record.dtype)
        outputs = {n: (list(s), str(d).removeprefix("torch.")) for n, (s, d) in specs.items()}
        fresh, replay_file = _replay_sets(contract, case, record, workdir) if device == "cuda" else ([], "")
        job = wire.TimingCaseJob(record.case, str(pool_file), len(pool), outputs, replay_file, len(fresh))
        cases.append(_Case(job, pool, roofline, fresh))
    return cases


# Whole input sets drawn afresh per timed case for the CUDA-graph replays (`ferret.bench.graph`): the pool differs from
# the gate's inputs only in its floating-point inputs; these differ in every input, the integer ones (lengths, block
# tables) too, so a value a host-side branch read at capture is not what a replayed set needs.
REPLAY_FRESH_SETS = 1


def _replay_sets(
    contract: Contract, case: Case, record: VariantRecord, workdir: Path
) -> tuple[list[dict[str, torch.Tensor]], str]:
    """`REPLAY_FRESH_SETS` draws of `case` with OS-random seeds (edits and layout applied), and their file."""
    fresh = [draw_inputs(contract, case, record.dtype, seed=secrets.randbits(62)) for _ in range(REPLAY_FRESH_SETS)]
    replay_file = workdir / "pools" / f"{record.id}.replay.safetensors"
    save_file({wire.pool_key(k, n): t for k, one_set in enumerate(fresh) for n, t in one_set.items()}, str(replay_file))
    return fresh, str(replay_file)


# How many reference processes time the baselines on the GPU, each taking the rounds in turn. A process carries a
# fixed part of a short call's time for its life, set by where its code and data land in the GPU's memory: eager
# rope decode (about 20 kernels) read 72-73 us in some processes and 76-78 us in others, with the same host and GPU
# addresses in every process (host layout fixed) and with L2 flushed by reading instead of writing
# (H200). torch's kernels load once per process, so the candidate's remedy (loaded
# copies of its code, `ferret.bench.process.CODE_COPIES`) is not open to the baselines: the baseline's time is the
# mean over reference processes of each one's median, as the candidate's is over its copies. With 3 of them, the mean
# still moved between checks by the luck of which offsets the 3 processes drew: torch.compile rope decode read 9.5,
# 8.9 and 9.1 us in three checks (0.6 us, over the 0.5 us limit; H200), and resampling
# the medians of one check's processes gave three checks over 5% apart 31% of the time with 3 processes, 17% with 5 and
# 7% with 8. So 5, one per round of a 5-round contract (a process takes one round at most: `_processes`).
REFERENCE_PROCESSES = 5
# The candidate's timer carries such an offset too, beside its loaded copies: rope decode's candidate rounds agreed
# within 0.1 us inside each check and moved 6.3 -> 6.6 us between checks (H200). So it
# runs in 2 processes taking the rounds in turn, each with every post-round check.
CANDIDATE_PROCESSES = 2


# The offset is a few microseconds at most, so it matters only to short cases: the MLA checks' per-process medians
# agreed within 0.3% (eager, torch.compile, 300-1100 us) and 2.5% (the candidate, 100 us) over 3 reference and 2
# candidate processes, and within 1.8% over three checks with one process of each (H200), while
# five timing processes made the MLA warm check 75-84 s instead of 52-57 s, over its budget of 60 s.
# So a check has several processes per role only when one of its speed cases is short: a roofline floor under this.
SHORT_CASE_FLOOR_MS = 0.005


def has_a_short_case(floors_ms: list[float] | None) -> bool:
    """Whether any speed case's floor is under SHORT_CASE_FLOOR_MS; True when the floors are unknown (a GPU without
    datasheet peaks), so that an unknown case gets the careful count."""
    return floors_ms is None or any(floor < SHORT_CASE_FLOOR_MS for floor in floors_ms)


def _processes(for_short: int, repeats: int, device: str, floors_ms: list[float] | None) -> int:
    """One timing process on the CPU rehearsal (times there are no speedups); on the GPU `for_short` when a speed
    case is short (`has_a_short_case`), else one; at most one per round."""
    if device != "cuda":
        return 1
    return min(for_short if has_a_short_case(floors_ms) else 1, repeats)


def reference_processes(repeats: int, device: str, floors_ms: list[float] | None = None) -> int:
    """The reference processes of a check (REFERENCE_PROCESSES for a short case)."""
    return _processes(REFERENCE_PROCESSES, repeats, device, floors_ms)


def candidate_processes(repeats: int, device: str, floors_ms: list[float] | None = None) -> int:
    """The candidate's timing processes of a check (CANDIDATE_PROCESSES for a short case)."""
    return _processes(CANDIDATE_PROCESSES, repeats, device, floors_ms)


def _floors_ms(cases: list[_Case], device: str) -> list[float] | None:
    """Each timed case's roofline floor on the GPU the judge sees; None when it has no datasheet peaks."""
    peaks = _peaks_seen_by_judge(device)
    if peaks is None:
        return None
    return [guards.floor_ms(case.roofline.bytes, case.roofline.flops, peaks) for case in cases]


def _make_timers(
    task: Task, gate: Path, candidate: Path, workdir: Path, cases: list[_Case], compare_compiled: bool, device: str
) -> tuple[list[TimerProcess], dict[Path, str]]:
    """The timing processes' folders and jobs, each with the rounds it takes (`rounds_in_turn`): the candidate's
    timers (`candidate_processes`) a copy of the candidate and nothing else, each hidden from the others; each
    reference timer (`reference_processes`) a copy of the baseline and of the project modules it imports
    (`_copy_baseline`). Each gets its own copy of the pools. Returns the timers (the candidate's first) and the
    reference timers' files with their digests."""
    contract = task.contract
    repeats = contract.speed.repeats
    hidden = hidden_from_candidates(gate, task.project_root)
    floors = _floors_ms(cases, device)  # None on the CPU: no datasheet peaks there
    shares = rounds_in_turn(repeats, candidate_processes(repeats, device, floors))
    folders = [workdir / wire.CANDIDATE_TIMER / str(index) for index in range(len(shares))]
    timers = [
        _candidate_timer(
            task,
            candidate,
            folder,
            cases,
            device,
            len(rounds),
            [*hidden, workdir / wire.REFERENCE_TIMER, *(f for f in folders if f != folder)],
        )
        for folder, rounds in zip(folders, shares, strict=True)
    ]
    files: dict[Path, str] = {}
    for index, rounds in enumerate(rounds_in_turn(repeats, reference_processes(repeats, device, floors))):
        timer, copies = _reference_timer(
            task, gate, workdir / wire.REFERENCE_TIMER / str(index), cases, device, len(rounds), compare_compiled
        )
        timers.append(timer)
        files.update({f: _sha256(f) for f in (*copies, timer.folder / "job.json")})
    return timers, files


@dataclass(frozen=True)
class _TimerJob:
    """What a timing process's job says beside the contract's params and read-only inputs: its role, the source
    it loads (its copy in `folder`) and the entry in it, whether it compiles it, its rounds and cases."""

    role: str
    source: Path
    entry: str
    compile_it: bool
    device: str
    repeats: int
    cases: list[wire.TimingCaseJob]
    folder: Path
    import_root: str = ""
    module: str = ""


def _timing_job(task: Task, spec: _TimerJob) -> None:
    """The timer's job.json; its paths as the process sees them (`process_view`: the candidate's timer is confined)."""
    contract = task.contract
    view = process_view(spec.folder, runs_candidate=spec.role == wire.CANDIDATE_TIMER)
    job = wire.TimingJob(
        role=spec.role,
        source=view.seen(spec.source),
        entry=spec.entry,
        compile=spec.compile_it,
        device=spec.device,
        params=dict(contract.params),
        read_only=[i.name for i in contract.inputs if i.role == "in"],
        repeats=spec.repeats,
        cases=spec.cases,
        result=view.seen(spec.folder / wire.TIMING_RESULT_FILE),
        import_root=spec.import_root,
        module=spec.module,
        settings=candidate_settings(
            spec.folder,
            runs_candidate=spec.role == wire.CANDIDATE_TIMER,
            compile_flags=contract.backend.compile_flags,
            view=view,
        ),
    )
    job.write(spec.folder / "job.json")


def _timer_process(task: Task, role: str, folder: Path, device: str, hide: list[Path]) -> TimerProcess:
    view = process_view(folder, runs_candidate=role == wire.CANDIDATE_TIMER)
    env = candidate_environment(
        folder,
        interpret=device != "cuda",
        runs_candidate=role == wire.CANDIDATE_TIMER,
        compile_flags=task.contract.backend.compile_flags,
        view=view,
    )
    args = [sys.executable, "-m", "ferret.bench.process", "job.json"]
    return TimerProcess(role, folder, args, env, hide, confine=role == wire.CANDIDATE_TIMER, view=view)


def _candidate_timer(
    task: Task, candidate: Path, folder: Path, cases: list[_Case], device: str, repeats: int, hide: list[Path]
) -> TimerProcess:
    """One candidate's timer: a copy of the candidate and copies of the pools (the candidate may rewrite them; the
    judge checks its own), `repeats` rounds of its own. It sees neither the gates (nor the compile cache beside
    them) nor the other timers' folders."""
    folder.mkdir(parents=True)
    loaded = folder / candidate_file_name(candidate)
    shutil.copyfile(candidate, loaded)
    view = process_view(folder, runs_candidate=True)
    case_jobs = []
    for case in cases:
        own_pool = folder / Path(case.job.pool_file).name
        shutil.copyfile(case.job.pool_file, own_pool)
        case_jobs.append(_own_case_job(case.job, own_pool, folder, shutil.copyfile, view))
    _timing_job(
        task,
        _TimerJob(wire.CANDIDATE_TIMER, loaded, task.contract.candidate_abi.entry, False, device, repeats, case_jobs, folder),
    )
    return _timer_process(task, wire.CANDIDATE_TIMER, folder, device, hide)


def _own_case_job(job: wire.TimingCaseJob, own_pool: Path, folder: Path, place, view: FolderView) -> wire.TimingCaseJob:
    """A timer's case job naming its own copies (or links, `place`) of the pool and of the replay sets, as the
    timer sees them (`view`)."""
    own_replay = ""
    if job.replay_file:
        own_file = folder / Path(job.replay_file).name
        place(job.replay_file, own_file)
        own_replay = view.seen(own_file)
    return wire.TimingCaseJob(job.case, view.seen(own_pool), job.pool_sets, job.outputs, own_replay, job.replay_sets)


def _reference_timer(
    task: Task, gate: Path, folder: Path, cases: list[_Case], device: str, repeats: int, compare_compiled: bool
) -> tuple[TimerProcess, list[Path]]:
    """One reference timer: the project's own baseline (and its torch.compile, with the gate's compile cache),
    the judge's pools linked (no candidate process sees them), `repeats` rounds of its own. Returns it and the
    files copied for it."""
    contract = task.contract
    folder.mkdir(parents=True)
    loaded, root, copies = _copy_baseline(task, folder)
    entry, module, import_root = task.baseline.__name__, "", ""
    if root is not None:  # imported as the contract names it, `module:attr`
        module, _, entry = contract.baseline.entry.partition(":")
        import_root = str(root)
    case_jobs = []
    for case in cases:
        own_pool = folder / Path(case.job.pool_file).name
        os.link(case.job.pool_file, own_pool)
        case_jobs.append(_own_case_job(case.job, own_pool, folder, os.link, process_view(folder, runs_candidate=False)))
    compile_it = bool(contract.baseline.compile and compare_compiled and device == "cuda")
    _timing_job(
        task, _TimerJob(wire.REFERENCE_TIMER, loaded, entry, compile_it, device, repeats, case_jobs, folder, import_root, module)
    )
    timer = _timer_process(task, wire.REFERENCE_TIMER, folder, device, [])
    timer.env["TORCHINDUCTOR_CACHE_DIR"] = str(_compile_cache(gate))
    return timer, copies


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


def _use_chosen_compile_cache(
    task: Task,
    gate: Path,
    workdir: Path,
    cases: list[_Case],
    timers: list[TimerProcess],
    device: str,
    deadline: float | None,
    reporter: Reporter,
    gpu_quiet: threading.Event | None = None,
) -> None:
    """Point every reference timer that compiles the baseline at the compile cache chosen for it
    (`ferret.gate.compile_choice`), choosing first when this gate's cache holds no choice yet."""
    references = [timer for timer in timers if timer.role == wire.REFERENCE_TIMER]
    if not references:
        return
    job = wire.TimingJob.read(references[0].folder / "job.json")
    if not job.compile:
        return
    choice = compile_choice_for(gate, timing_job_key(job))
    with choice.held():  # another check sharing these gates may be choosing: wait for it, then read its choice
        folder = choice.chosen() or _choose_compile_cache(
            task, gate, workdir, cases, choice, device, deadline, reporter, gpu_quiet
        )
    for timer in references:
        timer.env["TORCHINDUCTOR_CACHE_DIR"] = str(folder)


def _choose_compile_cache(
    task: Task,
    gate: Path,
    workdir: Path,
    cases: list[_Case],
    choice: CompileChoice,
    device: str,
    deadline: float | None,
    reporter: Reporter,
    gpu_quiet: threading.Event | None = None,
) -> Path:
    """COMPILE_TRIALS reference timers, each compiling the baseline into an empty cache of its own (beside whatever
    else runs), conducted one round each per case once `gpu_quiet` is set (one process on the GPU at a time, nothing
    else of the check on it); the fastest compiled baseline's cache is kept. When the
    trials fail, or none compiled, nothing is kept (the next check tries again) and the first trial's cache is used."""
    folders = choice.fresh_trials(COMPILE_TRIALS)
    trials = []
    for trial, cache in enumerate(folders):
        timer, _ = _reference_timer(task, gate, workdir / "compile-trials" / str(trial), cases, device, 1, True)
        timer.env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
        trials.append(timer)
    reporter(
        f"torch.compile of the baseline: {COMPILE_TRIALS} independent compiles, each timed, the fastest kept for "
        "this gate (its launch configurations differ from one compile to the next)"
    )
    names = [case.job.case for case in cases]
    started = time.monotonic()
    try:
        for timer in trials:
            start_timer(timer, task.contract.budgets.case_timeout_s, task.contract.budgets.candidate_memory_mb, deadline)
            timer.conducted.set()
        _wait_for_quiet(gpu_quiet, deadline)
        conduct(trials, len(names), COMPILE_TRIALS)
        wait_until_done(trials)
        results = [_read_results(timer, names) for timer in trials]
    except TimerFailed as failed:
        results = [f"the compile trial failed before step {failed.waited_for!r}"]
    finally:
        stop_all(trials)
        shutil.rmtree(workdir / "compile-trials", ignore_errors=True)
    problems = [r for r in results if isinstance(r, str)]
    best = None if problems else fastest_trial([r for r in results if not isinstance(r, str)])
    if best is None:
        reporter(
            f"torch.compile of the baseline: no compile chosen ({'; '.join(problems)[:500] or 'none compiled'}); "
            "this check uses one compile's picks"
        )
        return folders[0]
    times = ", ".join(
        f"{1e3 * ms:.1f}" if (ms := compiled_geomean_ms(r)) else "failed" for r in results if not isinstance(r, str)
    )
    reporter(
        f"torch.compile of the baseline: compiled geomean per trial {times} us; trial {best} kept "
        f"({time.monotonic() - started:.0f} s)"
    )
    return choice.keep(best)


def _wait_for_quiet(gpu_quiet: threading.Event | None, deadline: float | None) -> None:
    """Until the rest of the check leaves the GPU (the candidate's run beside it timed the trials unevenly), or the
    check's deadline."""
    if gpu_quiet is not None:
        gpu_quiet.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _run_timers(
    task: Task, timers: list[TimerProcess], names: list[str], reporter: Reporter, clocks: RoundClocks | None = None
) -> tuple[list[wire.TimingResults], list[wire.TimingResults], dict[str, float]] | str:
    """Every started timing process conducted to the end; their results, validated (the candidate's timers', then
    the reference timers'), and where their time went; or why there are none. `clocks` is filed with the SM
    clock during each round."""
    repeats = task.contract.speed.repeats
    candidates = sum(timer.role == wire.CANDIDATE_TIMER for timer in timers)
    reporter(
        f"timing {len(names)} cases against the baseline ({repeats} interleaved rounds; {candidates} candidate "
        f"and {len(timers) - candidates} reference processes)"
    )
    reporter.step("timing", 0, len(names), "waiting for the timing processes to warm up")

    def moved(case: int, what: str) -> None:
        label = "checking its timed calls" if what == "post" else f"round {int(what) + 1}/{repeats}"
        reporter.step("timing", case, len(names), f"{names[case]}: {label}")

    for timer in timers:
        timer.conducted.set()  # from now on a step must follow another within budgets.case_timeout_s
    try:
        seconds = conduct(timers, len(names), repeats, on_step=moved, clocks=clocks)
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
    valid = [r for r in results if not isinstance(r, str)]
    candidates = sum(timer.role == wire.CANDIDATE_TIMER for timer in timers)
    return valid[:candidates], valid[candidates:], seconds


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
    for case in raw.cases:  # the process names its answers file in its own terms; the judge reads it on the host
        if case.answers_file is not None:
            found = timer.view.on_host(case.answers_file) if timer.view is not None else Path(case.answers_file)
            case.answers_file = None if found is None else str(found)
    return raw


def _judge_timings(
    task: Task,
    cases: list[_Case],
    candidates: list[wire.TimingResults],
    references: list[wire.TimingResults],
    device: str,
    clocks: RoundClocks | None = None,
) -> TimingResult:
    """Answers, rounds, floor and speedups, computed here from what the judge knows (the device it sees, the
    inputs it drew): the candidate's timer shares its memory with the candidate."""
    contract = task.contract
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    peaks = _peaks_seen_by_judge(device)
    timings = []
    # One result per case, in order: _read_results refused results whose cases differ from the job's.
    for number, case in enumerate(cases):
        mine = ProcessRounds.of([r.cases[number] for r in candidates], contract.speed.repeats)
        theirs = ProcessRounds.of([r.cases[number] for r in references], contract.speed.repeats)
        checked, wrong = 0, []
        for result in mine.per_process:  # every candidate timer's timed answers, each against the judge's pool
            if result.answers_file is None:
                wrong.append("cross_call_caching: a candidate's timer sent back no answers of its timed calls")
                continue
            got, flags = check_timed_answers(
                task, case.pool, Path(result.answers_file), contract.primary_dtype, read_only, SAMPLED_AT_LEAST
            )
            checked, wrong = checked + got, wrong + flags
        timing = _case_timing(case, mine, theirs, checked, wrong, peaks, contract.speed.max_round_spread)
        if device == "cuda":
            _add_serving(task, case, timing, mine, theirs)
        if clocks is not None:
            _add_clocks(timing, clocks, number)
        _check_roofline(task, timing)
        timings.append(timing)
    detections = [
        Detection(cheat=cheat, catalogue=TIMING_CATALOGUE.get(cheat, []), evidence=f"{c.case}: {evidence}", source="timing")
        for c in timings
        for cheat, _, evidence in (flag.partition(": ") for flag in c.flags)
    ]
    method = METHOD.format(repeats=contract.speed.repeats, spread=contract.speed.max_round_spread)
    if device != "cuda":
        return TimingResult(
            measured=False,
            reason="guard rehearsal on the CPU: the guards ran, the times are not speedups",
            device=candidates[0].device,
            method=method,
            cases=timings,
            detections=detections,
            serving_reason=NOT_MEASURED_ON_CPU,
        )
    return _measured_result(task, candidates[0].device, method, timings, detections)


def _add_serving(task: Task, case: _Case, timing: CaseTiming, mine: ProcessRounds, theirs: ProcessRounds) -> None:
    """The case's serving-true timing (`ferret.gate.serving`): its record, its flags (a wrong replayed answer; a call
    that cannot be captured where the contract requires it) and its review lines."""
    event_ms = {"candidate": timing.candidate_ms, "baseline": timing.baseline_ms}
    if timing.baseline_compiled_ms is not None:
        event_ms["baseline_compiled"] = timing.baseline_compiled_ms
    serving, flags, review = judge_serving(
        mine.per_process,
        theirs.per_process,
        event_ms,
        task.contract.speed.graph_capture,
        replay_checker(task, case.pool, case.fresh),
    )
    timing.serving = serving
    timing.flags += flags
    timing.review += review


def _add_clocks(timing: CaseTiming, clocks: RoundClocks, number: int) -> None:
    """The SM clock during each round (`ferret.gate.sm_clock`), and in an unstable case's reason: it informs."""
    timing.sm_clock_mhz = {
        role: ranges for role in (wire.CANDIDATE_TIMER, wire.REFERENCE_TIMER) if (ranges := clocks.of(number, role))
    }
    if timing.unstable and timing.sm_clock_mhz:
        told = "; ".join(
            f"{role} " + ", ".join(f"{low}-{high}" for low, high in ranges) for role, ranges in timing.sm_clock_mhz.items()
        )
        timing.unstable_reason = f"{timing.unstable_reason} (SM clock by round, MHz: {told})"


def _measured_result(
    task: Task, device_name: str, method: str, timings: list[CaseTiming], detections: list[Detection]
) -> TimingResult:
    """The speed verdict: only stable cases count toward the target; an unstable one never helps a candidate."""
    contract = task.contract
    stable = [c for c in timings if not c.unstable]
    speedups, basis = serving_speedups(stable)
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
        speed_basis=basis if stable else None,
        serving_measured=any(c.serving is not None for c in timings),
    )


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
            reasons.append(
                f"{name}'s rounds {rounds} were mostly late calls (the host fell behind the GPU's spin; "
                f"late fractions {fractions})"
            )
    return reasons


@dataclass
class ProcessRounds:
    """One case's rounds from every timing process of one role (`per_process[k]` took the judge's rounds
    `shares[k]`), put back in the judge's round order. Each process carries a fixed part of a short call's time, so
    an implementation's time is the mean over processes of each one's median."""

    per_process: list[wire.TimingCaseResult]
    shares: list[list[int]]

    @classmethod
    def of(cls, results: list[wire.TimingCaseResult], repeats: int) -> ProcessRounds:
        return cls(results, rounds_in_turn(repeats, len(results)))

    @property
    def first(self) -> wire.TimingCaseResult:
        return self.per_process[0]

    def _in_round_order(self, field_of) -> dict[str, list[float]]:
        merged: dict[str, list[tuple[int, float]]] = {}
        for result, share in zip(self.per_process, self.shares, strict=True):
            for name, values in field_of(result).items():
                merged.setdefault(name, []).extend(zip(share, values, strict=False))
        return {name: [value for _, value in sorted(pairs)] for name, pairs in merged.items()}

    @property
    def samples(self) -> dict[str, list[float]]:
        return self._in_round_order(lambda r: r.samples)

    @property
    def late_fraction(self) -> dict[str, list[float]]:
        return self._in_round_order(lambda r: r.late_fraction)

    @property
    def spin_ms(self) -> dict[str, list[float]]:
        return self._in_round_order(lambda r: r.spin_ms)

    def interfered(self) -> list[int]:
        """The judge's rounds whose (reference) process's interference probe saw other work on the GPU."""
        return sorted(
            share[local]
            for result, share in zip(self.per_process, self.shares, strict=True)
            for local in guards.interfered_rounds(result.probes_ms)
            if local < len(share)
        )

    def kept_by_process(self, name: str, interfered: list[int]) -> list[list[float]]:
        return [
            [t for g, t in zip(share, result.samples.get(name, []), strict=False) if g not in interfered]
            for result, share in zip(self.per_process, self.shares, strict=True)
        ]

    def flags(self) -> list[str]:
        """Every process's flags, each once, in order."""
        return list(dict.fromkeys(flag for result in self.per_process for flag in result.flags))

    def probes_text(self) -> str:
        return "; ".join(", ".join(f"{1e3 * ms:.1f}" for ms in r.probes_ms) for r in self.per_process)

    def seconds(self, role: str) -> dict[str, float]:
        return {
            f"{role}{index or ''}:{part}": value
            for index, result in enumerate(self.per_process)
            for part, value in result.seconds.items()
        }


def _process_times(
    rounds: ProcessRounds, interfered: list[int]
) -> tuple[dict[str, float], dict[str, float], dict[str, list[float]]]:
    """Per implementation: the mean over its processes of each one's median (processes whose rounds all interfered
    left out, unless all did), the largest spread of rounds inside one process, and the medians."""
    means, spreads, per_process = {}, {}, {}
    for name in rounds.samples:
        kept = [times for times in rounds.kept_by_process(name, interfered) if times]
        kept = kept or [times for times in rounds.kept_by_process(name, []) if times]
        if kept:
            per_process[name] = [statistics.median(times) for times in kept]
            means[name] = statistics.fmean(per_process[name])
            spreads[name] = max(_spread(times) for times in kept)
    return means, spreads, per_process


def _case_timing(
    case: _Case, mine: ProcessRounds, theirs: ProcessRounds, checked: int, wrong: list[str], peaks: dict | None, max_spread: float
) -> CaseTiming:
    interfered = theirs.interfered()
    candidate_times, candidate_spreads, candidate_processes_ms = _process_times(mine, interfered)
    reference_times, reference_spreads, reference_processes_ms = _process_times(theirs, interfered)
    med, spreads = {**reference_times, **candidate_times}, {**reference_spreads, **candidate_spreads}
    reasons = [
        f"{name}'s rounds spread {value:.1%}, more than the contract's {max_spread:.0%}"
        for name, value in spreads.items()
        if value > max_spread
    ]
    reasons += _late_round_reasons({**theirs.late_fraction, **mine.late_fraction})
    if interfered:
        reasons.append(
            f"the GPU was shared during reference rounds {interfered} (interference probe, us before and "
            f"after each round, per reference process: {theirs.probes_text()}; over "
            f"{guards.INTERFERENCE_TOLERANCE:g}x the fastest)"
        )
    candidate_ms, baseline_ms = med["candidate"], med["baseline"]
    compiled_ms = med.get("baseline_compiled")
    speedup = baseline_ms / candidate_ms
    review = (
        [f"speedup {speedup:.1f}x over the baseline is above {guards.SUSPICIOUS_SPEEDUP:g}x: look at it"]
        if speedup > guards.SUSPICIOUS_SPEEDUP
        else []
    )
    first = mine.first
    timing = CaseTiming(
        case=first.case,
        candidate_ms=candidate_ms,
        baseline_ms=baseline_ms,
        baseline_compiled_ms=compiled_ms,
        speedup=speedup,
        speedup_vs_compiled=(compiled_ms / candidate_ms) if compiled_ms else None,
        samples={**theirs.samples, **mine.samples},
        process_ms={**reference_processes_ms, **candidate_processes_ms},
        round_spread=spreads,
        unstable=bool(reasons),
        unstable_reason="; ".join(reasons) or None,
        interfered_rounds=interfered,
        host_ms={**theirs.first.host_ms, **first.host_ms},
        late_fraction={**theirs.late_fraction, **mine.late_fraction},
        spin_ms={**theirs.spin_ms, **mine.spin_ms},
        compile_error=next((r.compile_error for r in theirs.per_process if r.compile_error), None),
        wall_ms=first.wall_ms,
        pool_sets=first.pool_sets,
        persisting_l2=first.persisting_l2,
        answers_checked=checked,
        flags=mine.flags() + wrong,
        review=review,
        kernels=dict(list(first.kernels.items())[:20]),
        process_seconds={**theirs.seconds("reference"), **mine.seconds("candidate")},
        roofline=RooflineWork(
            bytes=case.roofline.bytes,
            flops=case.roofline.flops,
            source=case.roofline.source,
            explanation=case.roofline.explanation,
        ),
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
            f"{count.flops:,} flops at {peaks['flops_per_s'] / 1e12:g} TFLOP/s; {count.source} roofline)"
        )


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
                f"({timing.roofline.explanation if timing.roofline else ''})"
            )


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
        return [f"speed not measured: {said}"] + (
            [f"serving timing not measured: {timing.serving_reason}"] if timing.serving_reason else []
        )
    shown = [_case_speed_line(case) for case in timing.cases]
    target = (
        "none set"
        if timing.min_speedup_required is None
        else (f"{timing.min_speedup_required}x " + ("met" if timing.target_met else "NOT met"))
    )
    geomean = "none stable" if timing.geomean_speedup is None else f"{timing.geomean_speedup:.2f}x"
    if timing.speed_basis is not None and timing.speed_basis != "gpu_events":
        geomean += f" ({timing.speed_basis.replace('_', ' ')})"
    return [
        *shown,
        f"speed: geomean {geomean} over the baseline, target {target}"
        + (f"; unstable (not counted): {', '.join(timing.unstable_cases)}" if timing.unstable_cases else ""),
    ]


def _case_speed_line(case: CaseTiming) -> str:
    parts = [f"{case.candidate_ms * 1e3:.1f} us", f"{case.speedup:.2f}x baseline"]
    if case.speedup_vs_compiled is not None:
        parts.append(f"{case.speedup_vs_compiled:.2f}x torch.compile")
    if case.fraction_of_floor is not None:
        parts.append(f"{case.fraction_of_floor:.1%} of the floor")
    if case.unstable:
        parts.append(f"UNSTABLE ({case.unstable_reason or 'rounds disagree'})")
    return f"  speed {case.case}: " + ", ".join(parts + _serving_parts(case))


def _serving_parts(case: CaseTiming) -> list[str]:
    """The case as serving runs it: the compared speedup, the candidate's replay and eager times and host share."""
    serving = case.serving
    if serving is None:
        return []
    parts = [f"serving {serving.speedup:.2f}x ({serving.basis.replace('_', ' ')})"]
    if "candidate" in serving.replay_ms:
        parts.append(f"replay {serving.replay_ms['candidate'] * 1e3:.1f} us")
    else:
        parts.append("not graph capturable")
    if "candidate" in serving.eager_ms:
        parts.append(f"eager {serving.eager_ms['candidate'] * 1e3:.1f} us")
    if "candidate" in serving.host_share:
        parts.append(f"host {serving.host_share['candidate']:.0%} of it")
    return parts
