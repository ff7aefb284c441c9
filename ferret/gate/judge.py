"""The judge: verifies the gate, runs a candidate in its own process on inputs only, and decides.

    judge = Judge(Task.load("contracts/rmsnorm.yaml"))      # gate found (or built) and verified once
    verdict = judge.check(Path("candidate.py"))             # any number of candidates, each judged alone

The verdict's parts follow the kernel verification protocol: correctness on the contract's cases, every
dtype, edge cases, fresh private cases, bitwise determinism, integrity, and a stress run (GPU). Timing
comes after, in its own process, and only for a candidate that is correct. The lock is checked again
before every candidate runs and before every verdict: it is a guard, not a set-up step.
"""

from __future__ import annotations

import datetime as _dt
import gc
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load, load_file

from ferret.backends import registry
from ferret.contract.model import Contract, ProfileName
from ferret.contract.task import Task
from ferret.errors import JudgeError, UsageError
from ferret.gate import detect
from ferret.gate.answers import check_moved_call
from ferret.gate.batch import BatchRequest, batch_requests, judge_batch
from ferret.gate.build import build_key, find_gate
from ferret.gate.candidate_run import CandidateRun, CandidateRunOptions, run_candidate, write_gate_inputs
from ferret.gate.comparisons import ToJudge, VariantComparisons
from ferret.gate.context import GateContext
from ferret.gate.decide import MovedCheck, judge_variant, mark, parts_of
from ferret.gate.fresh import FreshVariant, draw_fresh_cases
from ferret.gate.gpu_turns import GpuTurns
from ferret.gate.inputs import CheckedInputs, input_bytes
from ferret.gate.isolation import isolation_summary, sandbox_record
from ferret.gate.lock import sha256_file, verify_gate
from ferret.gate.machine import evidence_of, machine_fault_in, machine_faults, require_disk
from ferret.gate.memcheck import MemcheckOptions, run_memcheck
from ferret.gate.memcheck import detections_of as memcheck_detections
from ferret.gate.models import (
    Detection,
    GateManifest,
    MemcheckRecord,
    PartResult,
    TimingResult,
    VariantResult,
    Verdict,
    VerdictSummary,
)
from ferret.gate.phases import PhaseClock, TimingPhases
from ferret.gate.platform_info import default_profile, device_name, resolve_profile, versions
from ferret.gate.report import append_verdict
from ferret.gate.scan import scan_candidate
from ferret.gate.serving import NOT_MEASURED_ON_CPU
from ferret.gate.timing import StartedTiming, TimingOptions, finish_timing, gpu_alone, speed_lines, start_timing
from ferret.gate.trust import record_pass
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.sandbox.children import run_child, stop_on_signals
from ferret.sandbox.launch import candidate_file_name, remember_probes_in


def locate_gate(contract_path: Path, contract: Contract, gates_dir: Path, profile: str, progress: ProgressLike) -> Path:
    """The gate for this contract and machine, built by the test-writer's own process if missing."""
    progress = as_reporter(progress)
    gate = find_gate(gates_dir, build_key(contract_path, contract, profile))
    if gate is None:
        progress("no gate for this contract on this machine yet: the test-writer builds one")
        command = [
            sys.executable,
            "-m",
            "ferret.gate.build",
            str(contract_path),
            "--gates-dir",
            str(gates_dir),
            "--profile",
            profile,
        ]
        built = run_child(command, stdout=subprocess.PIPE, stderr=None, text=True)
        if built.returncode != 0:
            raise JudgeError(f"the test-writer failed to build the gate (exit {built.returncode})")
        gate = Path(built.stdout.strip().splitlines()[-1])
    return gate


def device_for(profile: str) -> str:
    """The device a profile runs on; its checks (cpu or gpu, a GPU present for gpu) are resolve_profile's."""
    return "cuda" if resolve_profile(profile) == "gpu" else "cpu"


def return_cached_gpu_memory() -> None:
    """Give the GPU memory torch's caching allocator keeps in this process back to the card. A check leaves its peak
    there (its comparisons and timed inputs on the GPU): after a round of MLA checks a process that by its pid was
    the dispatcher's held 50.7 GiB of an H100's 79 GiB, and the final acceptance check, another process, ran out of
    memory. Called after every check, so that the next
    candidate's process and the final check find the card as free as the first check did."""
    if torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


def judged_languages(task: Task, profile: str) -> list[str]:
    """What the optimizer is told a candidate may be written in: the contract's own language (backend.language:
    where this profile cannot judge it, the judge says so at the first check), and those it allows beside it
    (backend.allowed_languages) that this profile can judge, as their backends say (CUDA only on the GPU profile,
    where NVRTC loads; require_language refuses a candidate elsewhere)."""
    backend = task.contract.backend
    device = device_for(profile)
    extra = [
        lang
        for lang in backend.allowed_languages
        if lang != backend.language and registry.backend(lang).unavailable(device, profile) is None
    ]
    return [backend.language, *dict.fromkeys(extra)]


# Variants judged at once: their golden and result files are loaded and compared in threads (the work is in
# safetensors and torch, which let go of the GIL); a few at a time keeps the memory of large MLA variants bounded.
_COMPARE_WORKERS = 4


class _TimingStart:
    """`Judge._start_timing` run in a thread of its own, beside the fresh draw and the candidate's run. `result()`
    waits for it and raises what it raised (a roofline shown wrong on the timed inputs: ContractError); `stop()`,
    always called, waits for it too and stops whatever it started, so no timing process outlives its check."""

    def __init__(self, start: Callable[[], StartedTiming | None], wanted: bool):
        """Nothing is started, and no thread, where timing is not `wanted` (no GPU, or speed not asked for)."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferret-timing-start") if wanted else None
        self._future: Future[StartedTiming | None] | None = self._pool.submit(start) if self._pool else None

    def result(self, clock: PhaseClock) -> StartedTiming | None:
        if self._future is None:
            return None
        with clock.phase("timing_start_wait"):
            return self._future.result()

    def stop(self) -> None:
        if self._pool is None or self._future is None:
            return
        self._pool.shutdown(wait=True)
        if self._future.exception() is None:
            started = self._future.result()
            if started is not None:
                started.stop()


class _CandidateFolder:
    """A check's folder for the candidate's process, made before the fresh draw, the gate variants' inputs written
    into it in a thread beside the draw (`write_gate_inputs`): one after the other, the draw and the inputs were 2 s
    each of a warm MLA check's serial path. `gate_inputs` is that thread's work (`run_candidate` waits for it).
    Leaving the block waits for the thread and removes the folder."""

    def __init__(self, judge: Judge, checked: CheckedInputs):
        self.path = Path(tempfile.mkdtemp())  # a plain name: the candidate sees its folder's path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferret-candidate-inputs")
        self.gate_inputs: Future[None] = self._pool.submit(write_gate_inputs, judge.context, self.path, checked)

    def __enter__(self) -> _CandidateFolder:
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(wait=True)
        shutil.rmtree(self.path, ignore_errors=True)


def _moved_check(task: Task, inputs: Callable[[], dict[str, torch.Tensor]], dtype: str, wanted: bool) -> MovedCheck | None:
    """The check of a variant's call on moved inputs against the reference on `inputs` (the judge's own copy, never
    the candidate's folder's), moved as the call's record says; None where the job asks for no such call."""
    if not wanted:
        return None
    read_only = [i.name for i in task.contract.inputs if i.role == "in"]
    device = "cuda" if torch.cuda.is_available() else "cpu"  # as `judge_variant` compares
    return lambda got: check_moved_call(task, inputs(), got, dtype, read_only, device)[1]


def require_language(task: Task, device: str, profile: str, candidate: Path) -> None:
    """A candidate in a language the contract does not allow, or in one its backend cannot judge here (a CUDA
    candidate where there is no GPU to run it or no NVRTC to compile it), is the user's mistake (UsageError, exit 2),
    not a failed verdict; said before any gate is found or built."""
    language = registry.backend_for(candidate.read_text(errors="replace"))
    backend = task.contract.backend
    if not backend.allows(language.name):
        allowed = ", ".join([backend.language, *backend.allowed_languages])
        raise UsageError(
            f"{candidate} is a {language.name} candidate ({registry.evidence(language)}), but {task.path} "
            f"allows {allowed} only (backend.language, backend.allowed_languages)"
        )
    why_not = language.unavailable(device, profile)
    if why_not is not None:
        raise UsageError(f"{candidate} is a {language.title} candidate: {why_not}")


class Judge:
    """One task's gate on this machine, ready to judge candidates. What depends only on the gate (finding or
    building it, its manifest) is done once here; every check verifies the lock again."""

    def __init__(
        self,
        task: Task,
        gates_dir: str | Path = "gates",
        profile: str | None = None,
        progress: ProgressLike = None,
        memcheck: MemcheckOptions | None = None,
    ):
        started = time.perf_counter()
        self.memcheck = memcheck or MemcheckOptions()  # compute-sanitizer's memcheck on the GPU profile
        self.profile: ProfileName = resolve_profile(profile, needs_gpu=False) if profile else default_profile()
        self.device = device_for(self.profile)
        # Variants are judged while the candidate's process runs (`VariantComparisons`) where the candidate works on
        # the GPU: the warm MLA check on the H200 lost 3-5 s of comparisons after the run. Under the interpreter the
        # candidate and the comparisons share the host's cores: on 2 cores a warm CPU MLA check took 21.4-23.4 s
        # judging early and 16.7-19.5 s judging after the run.
        self.judge_early = self.device == "cuda"
        self.progress = as_reporter(progress)
        remember_probes_in(Path(gates_dir) / ".cache")  # the sandbox probes, kept beside the gates, hidden from candidates
        gate = locate_gate(task.path, task.contract, Path(gates_dir), self.profile, self.progress)
        # The task, the gate and its verified manifest, made once and passed whole to every step of a check.
        self.context = GateContext(task, GateManifest.model_validate(verify_gate(gate, require_trusted=True)), gate)
        # Said once, in the first verdict's phases (`gate_setup`): finding or building the gate, verifying it.
        self._setup_seconds: float | None = time.perf_counter() - started

    @property
    def task(self) -> Task:
        return self.context.task

    @property
    def contract(self) -> Contract:
        return self.context.contract

    @property
    def gate(self) -> Path:
        return self.context.gate

    @property
    def manifest(self) -> GateManifest:
        return self.context.manifest

    def check(
        self,
        candidate: str | Path,
        *,
        measure_speed: bool = True,
        run_stress: bool = True,
        compare_compiled: bool = True,
        static: list[Detection] | None = None,
        progress: ProgressLike = None,
        record: bool = True,
    ) -> Verdict:
        """Judge one candidate and append the verdict to the gate's report. `static` is the static scan's
        findings if the caller already has them (the dispatcher scans each candidate once). `record=False` leaves
        the report as it is: an audit's hundreds of mutants would push real verdicts out of its bounded index."""
        with stop_on_signals(), machine_faults(self.device):  # a fault of the machine is no verdict (exit 5)
            try:
                # Said before the check writes anything: the folders it writes cannot hold what it will write.
                require_disk(self.context, self.device, timed=self.device == "cuda" and measure_speed)
                verdict = self._check(
                    Path(candidate),
                    measure_speed,
                    run_stress,
                    compare_compiled,
                    static,
                    as_reporter(progress) if progress is not None else self.progress,
                    record,
                )
                remember_pass(verdict)
                return verdict
            finally:
                return_cached_gpu_memory()

    def _open_check(
        self, candidate: Path, static: list[Detection] | None, progress: Reporter
    ) -> tuple[PhaseClock, list[Detection], float]:
        """Before the candidate runs: its file and language, the gate's lock verified, the static scan (unless
        given), and the check's deadline. Returns (the check's clock, the static findings, the deadline)."""
        if not candidate.is_file():
            raise FileNotFoundError(f"{candidate}: no such candidate file")
        self._require_its_language(candidate)
        clock = PhaseClock()
        if self._setup_seconds is not None:
            clock.add("gate_setup", self._setup_seconds)
            self._setup_seconds = None
        with clock.phase("gate_verify"):
            verify_gate(self.gate, require_trusted=True)
        progress(f"gate {self.gate.name[:16]}… verified ({len(self.manifest.files)} files)")
        deadline = time.monotonic() + self.contract.budgets.check_timeout_s
        with clock.phase("static_scan"):
            static = scan_candidate(candidate, self.contract) if static is None else static
        for finding in static:
            progress(f"static scan: {finding.evidence}")
        return clock, static, deadline

    def _check(
        self,
        candidate: Path,
        measure_speed: bool,
        run_stress: bool,
        compare_compiled: bool,
        static: list[Detection] | None,
        progress: Reporter,
        record: bool = True,
    ) -> Verdict:
        started_wall = time.perf_counter()
        started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        clock, static, deadline = self._open_check(candidate, static, progress)
        # The timed inputs are drawn and the timing processes started in a thread beside the fresh draw and the
        # candidate's run (`_TimingStart`): on a warm MLA gate drawing them was 3-4 s of a check's serial path. The
        # gate variants' inputs checked against the lock on the way are shared with the candidate's folder.
        checked: CheckedInputs = {}
        gpu_quiet = threading.Event()  # set when the candidate's run and its comparisons are over (see start_timing)
        starting = _TimingStart(
            lambda: self._start_timing(candidate, progress, compare_compiled, measure_speed, deadline, clock, checked, gpu_quiet),
            wanted=self.device == "cuda" and measure_speed,
        )
        try:
            with _CandidateFolder(self, checked) as folder:
                with clock.phase("fresh_draw"):
                    fresh = draw_fresh_cases(self.task, self.profile, self.device)
                if fresh:
                    progress(f"{len(fresh)} fresh private cases drawn: " + ", ".join(f"{f.id} {f.case.dims}" for f in fresh))
                batch: list[BatchRequest] = []
                if self.contract.cases.batch_invariance is not None:  # a phase only where the contract asks for it
                    with clock.phase("batch_inputs"):
                        batch = batch_requests(self.context)
                # A content replay is checked by the timed calls' answers where the candidate is timed; elsewhere
                # (the CPU profile, speed not asked for) by one more call on moved inputs in some variants.
                moved_call = self.device != "cuda" or not measure_speed
                run, results, (batch_part, batch_found) = self._run_and_judge(
                    candidate, progress, run_stress, fresh, batch, deadline, clock, folder, moved_call
                )
            gpu_quiet.set()
            judged = self._verdict_parts(run, results, static, batch_part, batch_found, run_stress, fresh)
            memcheck = self._memcheck(candidate, judged[2], deadline, clock, progress)
            judged = with_memcheck(judged, memcheck)
            started = starting.result(clock)  # the roofline shown wrong on the timed inputs: ContractError, here
            checked.clear()  # both of its users are done: its hundreds of MB are not held through the timing
            timing = self._timing(started, progress, judged[2], measure_speed, deadline, clock)
            for line in speed_lines(timing):
                progress(line)
        finally:
            gpu_quiet.set()  # a start still waiting for it must not hold up its own stop
            starting.stop()  # killed and deleted, timed or not (finish_timing stopped them already)
        parts, detections, passed = _with_timing_detections(judged, timing)
        if not passed and not detections:
            detections = detect.unnamed(parts)  # never expected: every rejection path names what it saw
        verdict = Verdict(
            passed=passed,
            first_failing_stage=self._first_failing_stage(results),
            gate_hash=self.gate.name,
            op=self.contract.op,
            profile=self.profile,
            candidate_path=str(candidate),
            candidate_sha256=sha256_file(candidate),
            parts=parts,
            detections=detections,
            variants=results,
            timing=timing,
            device=device_name(),
            versions=versions(),
            seeds={r.id: r.seed for r in self.manifest.variants} | {f.id: f.seed for f in fresh},
            isolation=isolation_summary(),
            sandbox=sandbox_record(),
            fault=run.fault,
            memcheck=memcheck,
            started_at=started_at,
            seconds=time.perf_counter() - started_wall,
            phases=clock.phases(),
        )
        if record:
            append_verdict(self.gate, verdict)
        progress("seconds by phase: " + ", ".join(f"{p.name} {p.seconds:.1f}" for p in verdict.phases))
        return verdict

    def _first_failing_stage(self, results: list[VariantResult]) -> str | None:
        """The contract's first stage that some variant failed first, in the contract's order."""
        return next((s.name for s in self.contract.stages if any(r.first_failing_stage == s.name for r in results)), None)

    def _memcheck(self, candidate: Path, passed: bool, deadline: float, clock: PhaseClock, progress: Reporter) -> MemcheckRecord:
        """On the GPU profile, a candidate correct so far runs once more under compute-sanitizer's memcheck
        (`ferret.gate.memcheck`), holding the GPU beside other checks' runs as the candidate's run does."""
        if self.device != "cuda":
            return MemcheckRecord(ran=False, reason="the CPU profile: no GPU memory to check")
        if not self.memcheck.enabled:
            return MemcheckRecord(ran=False, reason="memcheck turned off by the judge's options")
        if not passed:
            return MemcheckRecord(ran=False, reason="not run: the candidate is rejected already")
        with clock.phase("memcheck"), self._gpu_shared(progress, clock):
            record = run_memcheck(self.context, candidate, self.memcheck, deadline)
        progress(
            f"memcheck: {record.errors} error(s) on {record.variant}" if record.ran else f"memcheck not run: {record.reason}"
        )
        return record

    def _verdict_parts(
        self,
        run: CandidateRun,
        results: list[VariantResult],
        static: list[Detection],
        batch_part: PartResult,
        batch_found: list[Detection],
        run_stress: bool,
        fresh: list[FreshVariant],
    ) -> tuple[dict[str, PartResult], list[Detection], bool]:
        """Every part's status from the judged variants, what was detected, and whether the candidate is correct.
        Each variant's dims tell a fresh case with a gate case's own shape (`detect.hardcoded_cases`)."""
        dims = {r.id: r.dims for r in self.manifest.variants} | {f.id: f.case.dims for f in fresh}
        found = static + batch_found + [d for r in results for d in r.detections]
        detections = detect.unique(
            found
            + detect.hardcoded_cases(
                [r for r in results if r.part != "fresh_cases"], [r for r in results if r.part == "fresh_cases"], dims, found
            )
        )
        parts = parts_of(results, run.stress, self.device, run_stress, detections, batch_part)
        if parts["stress"].status == "fail":
            detections = detect.unique(detections + detect.from_stress(run.stress))
        return parts, detections, all(p.status != "fail" for p in parts.values())

    def _run_and_judge(
        self,
        candidate: Path,
        progress: Reporter,
        run_stress: bool,
        fresh: list[FreshVariant],
        batch: list[BatchRequest],
        deadline: float,
        clock: PhaseClock,
        folder: _CandidateFolder,
        moved_call: bool,
    ) -> tuple[CandidateRun, list[VariantResult], tuple[PartResult, list[Detection]]]:
        """The candidate's process over every variant (in `folder`), each variant judged against its golden stages
        as soon as the process has moved past it (`VariantComparisons`), and the requests run alone against their
        rows of the full batch (batch invariance). `moved_call`: one variant of each part also answers inputs with a few
        elements moved, checked against the reference on the judge's copy moved the same way (where nothing is timed)."""
        workdir = folder.path
        try:
            moved = self._moved_variants(fresh) if moved_call else frozenset()
            to_judge = self._to_judge(fresh, moved)
            with (
                VariantComparisons(self.contract, to_judge, workdir / "out", judge_variant, _COMPARE_WORKERS) as comparisons,
                self._gpu_shared(progress, clock),
            ):
                options = CandidateRunOptions(
                    self.device,
                    progress,
                    run_stress,
                    fresh,
                    deadline,
                    batch,
                    folder.gate_inputs,
                    on_moved=comparisons.candidate_moved_to if self.judge_early else None,
                    moved=moved,
                )
                run = run_candidate(self.context, candidate, workdir, options)
                # A full disk or a lost GPU that the judge confirms is the machine's: no verdict (exit 5).
                ran = evidence_of(run.statuses, run.stress, workdir, self.device, candidate_file_name(candidate))
                fault = machine_fault_in(ran)
                if fault is not None:
                    raise fault
                for name, seconds in run.phases:
                    clock.add(name, seconds)
                # The gate is verified again before the verdict: nothing may have changed while the candidate ran.
                with clock.phase("gate_reverify"):
                    verify_gate(self.gate, require_trusted=True)
                results = comparisons.results(run.statuses, clock)
            for result in results:
                if result.failure is None or result.failure.kind != "not_run":
                    progress(f"  {result.id}: {mark(result)}")
            if batch:
                with clock.phase("compare:batch_invariance"):
                    batch_verdict = judge_batch(self.contract, batch, run.statuses, workdir / "out")
            else:
                batch_verdict = judge_batch(self.contract, batch, run.statuses, workdir / "out")  # skipped: no work
            if batch:
                progress(f"  batch invariance: {batch_verdict[0].status} ({batch_verdict[0].detail[:200]})")
            if run.fault is not None:
                # Said once: the variant's own line above already gave the message (except for the stress run).
                said = "" if run.fault.variant in run.statuses else f": {run.fault.message[:300]}"
                progress(
                    f"the candidate's run ended at {run.fault.variant} ({run.fault.kind}{said}); "
                    f"{len(run.fault.not_run)} variants after it not run"
                )
            return run, results, batch_verdict
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _moved_variants(self, fresh: list[FreshVariant]) -> frozenset[str]:
        """One variant of each part, drawn from the OS's randomness, makes the call on moved inputs. A content replay
        gains nothing where nothing is timed: the call is evidence that names one, and a call in every variant was a
        sixth of an MLA check. The candidate cannot tell which: the call sits at a random place among the repeats."""
        parts: dict[str, list[str]] = {}
        for record in self.manifest.variants:
            parts.setdefault(record.part, []).append(record.id)
        if fresh:
            parts["fresh_cases"] = [f.id for f in fresh]
        draw = random.SystemRandom()
        return frozenset(draw.choice(ids) for ids in parts.values())

    def _to_judge(self, fresh: list[FreshVariant], moved: frozenset[str]) -> list[ToJudge]:
        """Each variant's ids, its golden stages (loaded when judged), its inputs' content hashes, and for the variants
        in `moved` the check of its call on moved inputs against the judge's own copy of its inputs."""
        to_judge: list[ToJudge] = [
            (
                (r.id, r.case, r.dtype, r.part),
                lambda r=r: load_file(str(self.gate / r.golden_file)),
                r.inputs.content_sha256,
                _moved_check(self.task, lambda r=r: load(input_bytes(self.contract, self.gate, r)), r.dtype, r.id in moved),
            )
            for r in self.manifest.variants
        ]
        to_judge.extend(
            (
                (f.id, f.case.name, f.dtype, "fresh_cases"),
                lambda f=f: f.golden,
                f.input_digests(),
                _moved_check(self.task, lambda f=f: f.inputs, f.dtype, f.id in moved),
            )
            for f in fresh
        )
        return to_judge

    @contextmanager
    def _gpu_shared(self, progress: Reporter, clock: PhaseClock) -> Iterator[None]:
        """The candidate's run holds the GPU beside other checks' GPU work, never beside their timing
        (ferret/gate/gpu_turns.py); the CPU profile needs no turn."""
        if self.device != "cuda":
            yield
            return
        with GpuTurns.for_this_process().shared() as waited:
            if waited > 0.05:
                clock.add("gpu_turn_run", waited)
            if waited > 1.0:
                progress(f"the candidate's run waited {waited:.1f} s for another check's timing to end")
            yield

    def _require_its_language(self, candidate: Path) -> None:
        require_language(self.task, self.device, self.profile, candidate)

    def _start_timing(
        self,
        candidate: Path,
        progress: Reporter,
        compare_compiled: bool,
        requested: bool,
        deadline: float,
        clock: PhaseClock,
        checked: CheckedInputs | None = None,
        gpu_quiet: threading.Event | None = None,
    ) -> StartedTiming | None:
        """On a GPU, when speed is asked for: the timed inputs drawn and the timing processes started now, so that
        their start, loading, torch.compile and warm-up overlap the candidate's correctness run (on a warm MLA
        gate they were a fifth of a check). They are timed only if the candidate turns out correct."""
        if self.device != "cuda" or not requested:
            return None
        with clock.phase("timing_inputs"):
            return start_timing(
                self.context,
                candidate,
                TimingOptions(progress, compare_compiled, deadline=deadline, checked=checked, gpu_quiet=gpu_quiet),
            )

    def _timing(
        self, started: StartedTiming | None, progress: Reporter, passed: bool, requested: bool, deadline: float, clock: PhaseClock
    ) -> TimingResult:
        if self.device != "cuda":
            return TimingResult(
                measured=False,
                reason="no GPU: speed is not measured (an interpreter time is never a speedup)",
                serving_reason=NOT_MEASURED_ON_CPU,
            )
        if not passed:
            return TimingResult(measured=False, reason="not timed: the candidate is not correct")
        if not requested or started is None:
            return TimingResult(measured=False, reason="speed measurement not requested")
        if time.monotonic() >= deadline:
            return TimingResult(measured=False, reason="not timed: the check's deadline (budgets.check_timeout_s) passed")
        with gpu_alone(self.device, progress) as waited:
            if waited > 0.05:
                clock.add("gpu_turn_timing", waited)
            # Its phases (timing_process, timed_answers) are read from its progress steps, from the end of the wait.
            phases = TimingPhases(progress, clock, first="timing_process")
            try:
                return finish_timing(self.task, started, phases)
            finally:
                phases.close_at_end()


def check(
    contract_path: str | Path,
    candidate_path: str | Path,
    gates_dir: str | Path = "gates",
    profile: str | None = None,
    progress: ProgressLike = None,
    measure_speed: bool = True,
    run_stress: bool = True,
    compare_compiled: bool = True,
) -> tuple[Verdict, Path]:
    """Judge one candidate; append the verdict to the gate's report. Returns (verdict, gate folder).

    The thin public wrapper of `Judge(Task.load(contract_path), ...).check(candidate_path)`.
    `run_stress=False` leaves the stress part out (reported as skipped) and `compare_compiled=False` times
    the candidate against the eager baseline only: the dispatcher's rounds do both to stay quick, and its
    final acceptance check runs everything. `progress` is a reporter, a function of one line, or None (lines
    go to the `ferret` logger). The whole check after the gate is found has the contract's deadline
    (`budgets.check_timeout_s`). On SIGINT or SIGTERM (when called from the main thread with the default
    dispositions, or ignored ones as a script's background job inherits) every process it started is killed and
    its folders removed before `Interrupted` is raised.

    Raises ContractError for a bad contract, UsageError for a profile this machine cannot run, and
    GateTampered for a gate whose lock does not hold.
    """
    with stop_on_signals():
        task = Task.load(contract_path)
        if Path(candidate_path).is_file():  # a wrong language is said before a gate is found or built
            name = resolve_profile(profile, needs_gpu=False) if profile else default_profile()
            require_language(task, device_for(name), name, Path(candidate_path))
        judge = Judge(task, gates_dir, profile, progress)
        verdict = judge.check(
            candidate_path, measure_speed=measure_speed, run_stress=run_stress, compare_compiled=compare_compiled
        )
        return verdict, judge.gate


def remember_pass(verdict: Verdict) -> None:
    """A passing verdict recorded where the gates' trust lives (`ferret.gate.trust`), for `ferret export`: the
    verdict files under gates/ are outside the lock, so they prove nothing about a pass."""
    if verdict.passed:
        record_pass(
            verdict.gate_hash,
            verdict.candidate_sha256,
            {"op": verdict.op, "profile": verdict.profile, "started_at": verdict.started_at, "device": verdict.device},
        )


def summary(verdict: Verdict) -> VerdictSummary:
    """The verdict in brief (`VerdictSummary`): what the `GATE_RESULT` line prints (`.as_json()`), what the
    run log keeps and what the optimizer and reviewer see."""
    return VerdictSummary.model_validate(
        {
            "pass": verdict.passed,
            "first_failing_stage": verdict.first_failing_stage,
            "gate": verdict.gate_hash,
            "candidate_sha256": verdict.candidate_sha256,
            "parts": {k: v.status for k, v in verdict.parts.items()},
            "detections": [
                {"cheat": d.cheat, "catalogue": d.catalogue, "evidence": d.evidence[:300]} for d in verdict.detections
            ],
            "fault": (
                verdict.fault.model_dump(exclude={"not_run"}) | {"not_run": len(verdict.fault.not_run)} if verdict.fault else None
            ),
            "cases": {
                r.id: {
                    "pass": r.passed,
                    **({"failure": r.failure.kind, "message": r.failure.message[:300]} if r.failure else {}),
                    "stages": {
                        s.stage: (
                            {"pass": s.passed, "rel_l2": s.rel_l2, "max_abs_rel_peak": s.max_abs_rel_peak, "cosine": s.cosine}
                            | ({"worst": s.worst.named or s.worst.index} if s.worst and not s.passed else {})
                            | ({"tolerance": s.tolerance.model_dump(exclude_none=True)} if s.tolerance and not s.passed else {})
                            if s.exposed
                            else "not exposed"
                        )
                        for s in r.stages
                    },
                }
                for r in verdict.variants
            },
            "timing": verdict.timing.model_dump(exclude={"cases": {"__all__": {"samples"}}}),
        }
    )


def with_memcheck(
    judged: tuple[dict[str, PartResult], list[Detection], bool], record: MemcheckRecord
) -> tuple[dict[str, PartResult], list[Detection], bool]:
    """The verdict's parts, detections and pass after memcheck: an error the sanitizer reported fails the integrity
    part and the candidate, however correct its answers were; memcheck not run changes nothing."""
    parts, detections, passed = judged
    found = memcheck_detections(record)
    if not found:
        return parts, detections, passed
    said = parts["integrity"].detail if parts["integrity"].status == "fail" else ""
    parts["integrity"] = PartResult(
        status="fail",
        detail="; ".join(filter(None, [said, *(f"{d.cheat}: {d.evidence[:200]}" for d in found)])),
    )
    return parts, detect.unique(detections + found), False


def _with_timing_detections(
    judged: tuple[dict[str, PartResult], list[Detection], bool], timing: TimingResult
) -> tuple[dict[str, PartResult], list[Detection], bool]:
    """The verdict's parts, detections and pass after timing: a time the guards call impossible or replayed rejects
    the candidate, however correct it was."""
    parts, detections, passed = judged
    if not timing.detections:
        return parts, detections, passed
    parts["integrity"] = PartResult(
        status="fail",
        detail="; ".join(f"{d.cheat} (docs/cheats.md {d.catalogue}): {d.evidence[:200]}" for d in timing.detections),
    )
    return parts, detect.unique(detections + timing.detections), False
