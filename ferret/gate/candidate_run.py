"""Running a candidate: its folder (its own copy of the candidate, every variant's inputs, never a golden
value), one isolated process over every variant (`ferret.sandbox.runner`), and what comes back, validated
into the wire's records. A fault that ends the process is charged to the variant it happened in; the
variants after it are not run, and no process is restarted for them."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError
from safetensors.torch import save_file

from ferret import wire
from ferret.contract.model import Case, Contract
from ferret.gate.batch import BatchRequest
from ferret.gate.context import GateContext
from ferret.gate.fresh import FreshVariant
from ferret.gate.inputs import CheckedInputs, output_specs, prepare_inputs
from ferret.gate.isolation import hidden_from_candidates
from ferret.gate.models import FaultKind, RunFault
from ferret.progress import ProgressLike, as_reporter
from ferret.sandbox.launch import (
    ProcessOptions,
    ProcessOutcome,
    candidate_environment,
    candidate_file_name,
    candidate_settings,
    folder_view,
    run_isolated,
)
from ferret.sandbox.view import FolderView

_STATUS = TypeAdapter(wire.VariantStatus)
# Gate variants whose inputs are written at once (`write_candidate_job`).
_INPUT_WORKERS = 4
_STRESS = TypeAdapter(wire.StressResult)


@dataclass
class CandidateRun:
    """What the candidate's process left: a status per variant (None where it left none, or one that does
    not fit the wire), the stress result, and the fault that ended it early, if one did."""

    statuses: dict[str, wire.VariantStatus | None]
    stress: wire.StressResult | None
    fault: RunFault | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    """(phase, seconds) in the judge's clock: the job's folder, the process's start (imports, loading the
    candidate), each variant part's run, the stress run, the end."""


def variant_job(
    variant_id: str,
    inputs_file: Path,
    contract: Contract,
    case: Case,
    dtype: str,
    view: FolderView,
    moved_call: bool = False,
    part: str = "",
) -> wire.VariantJob:
    specs = output_specs(contract, case, dtype)
    return wire.VariantJob(
        id=variant_id,
        inputs_file=view.seen(inputs_file),
        outputs={n: (list(shape), str(dt).removeprefix("torch.")) for n, (shape, dt) in specs.items()},
        inout=[i.name for i in contract.inputs if i.role == "inout"],
        in_only=[i.name for i in contract.inputs if i.role == "in"],
        traced=case.traced,
        repeats=contract.budgets.fast_calls(part, case.traced),
        moved_call=moved_call,
    )


def gate_inputs_file(workdir: Path, variant_id: str) -> Path:
    return workdir / "in" / f"{variant_id}.safetensors"


def write_gate_inputs(context: GateContext, workdir: Path, checked: CheckedInputs | None = None) -> None:
    """Every gate variant's inputs in the candidate's folder (`gate_inputs_file`), a few at a time: reading,
    hashing against the lock and writing a large MLA variant's inputs let go of the GIL, and one after another
    they were 2.5 s of a warm MLA check. The judge runs this beside the fresh draw (`ferret.gate.judge`);
    `checked` is the check's memo of inputs checked against the lock."""
    (workdir / "in").mkdir(exist_ok=True)
    records = context.manifest.variants
    targets = [gate_inputs_file(workdir, record.id) for record in records]
    with ThreadPoolExecutor(max_workers=_INPUT_WORKERS, thread_name_prefix="ferret-inputs") as pool:
        list(
            pool.map(
                lambda record, target: prepare_inputs(context.contract, context.gate, record, target, checked), records, targets
            )
        )


@dataclass(frozen=True)
class CandidateRunOptions:
    """How one candidate's process runs: on `device` (cpu or cuda), with the stress run (GPU) or not, the fresh
    cases and batch-invariance requests beside the gate's variants, the check's `deadline` (a `time.monotonic()`
    instant). `gate_inputs`: the gate variants' inputs being written already (`write_gate_inputs` in a thread).
    `on_moved(position)`: called each time the process says it started a later step. `moved`: the variants that
    make one more fast call on inputs with a few elements moved (`wire.VariantJob.moved_call`)."""

    device: str
    progress: ProgressLike = None
    run_stress: bool = True
    fresh: Sequence[FreshVariant] = ()
    deadline: float | None = None
    batch: Sequence[BatchRequest] = ()
    gate_inputs: Future[None] | None = None
    on_moved: Callable[[int], None] | None = None
    moved: frozenset[str] = frozenset()


def write_candidate_job(context: GateContext, candidate: Path, workdir: Path, options: CandidateRunOptions) -> wire.CandidateJob:
    """The candidate's folder and job.json; the variants in the order the runner takes them. `options.gate_inputs`:
    the gate variants' inputs being written already (`write_gate_inputs` in a thread), waited for here (what it
    raised, GateTampered say, raised here); else they are written now. Every path in the job is the process's
    (`folder_view`); the judge reads the results in `workdir`."""
    contract, manifest = context.contract, context.manifest
    view = folder_view(workdir)
    if options.gate_inputs is None:
        write_gate_inputs(context, workdir)
    else:
        options.gate_inputs.result()
    loaded = workdir / candidate_file_name(candidate)
    shutil.copyfile(candidate, loaded)
    targets = [gate_inputs_file(workdir, record.id) for record in manifest.variants]
    variants = []
    for record, target in zip(manifest.variants, targets, strict=True):
        case = next(c for c in contract.cases_for(manifest.profile) if c.name == record.case)
        moved = record.id in options.moved
        variants.append(variant_job(record.id, target, contract, case, record.dtype, view, moved, record.part))
    for part, items in (("fresh_cases", options.fresh), ("batch_invariance", options.batch)):
        for item in items:
            target = workdir / "in" / f"{item.id}.safetensors"
            save_file(item.inputs, str(target))
            variants.append(variant_job(item.id, target, contract, item.case, item.dtype, view, item.id in options.moved, part))
    stress_index = None
    if options.device == "cuda" and options.run_stress:
        sizes = [r.inputs.nbytes for r in manifest.variants]
        stress_index = max(range(len(sizes)), key=sizes.__getitem__)
    job = wire.CandidateJob(
        candidate=view.seen(loaded),
        entry=contract.candidate_abi.entry,
        device=options.device,
        params=dict(contract.params),
        repeats=contract.budgets.determinism_repeats,
        stress_iterations=contract.budgets.stress_iterations,
        stress_variant=stress_index,
        variants=variants,
        result_dir=view.seen(workdir / "out"),
        settings=candidate_settings(workdir, compile_flags=contract.backend.compile_flags, view=view),
    )
    job.write(workdir / "job.json")
    return job


def _position(out: Path) -> int | None:
    """The step the candidate's process last said it started (a variant's index; past the last, the stress run)."""
    try:
        return int((out / wire.CURRENT_FILE).read_text())
    except (OSError, ValueError):
        return None


def read_status(path: Path) -> wire.VariantStatus | None:
    """A status file as the wire declares it; None if it is missing or does not fit (the candidate's doing)."""
    try:
        return _STATUS.validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def run_candidate(context: GateContext, candidate: Path, workdir: Path, options: CandidateRunOptions) -> CandidateRun:
    """Run every variant in one candidate process. A fault that ends the process (a hang, a crash, memory,
    the check's deadline) is charged to the variant it happened on; the variants after it are not run.
    `options.on_moved(position)` is called each time the process says it started a later step (every variant
    before `position` is finished: the judge compares them while the process goes on)."""
    progress = as_reporter(options.progress)
    contract, on_moved = context.contract, options.on_moved
    started = time.perf_counter()
    job = write_candidate_job(context, candidate, workdir, options)
    ids = [v.id for v in job.variants]
    out = workdir / "out"  # the job's result_dir, where the judge reads it
    parts = (
        [r.part for r in context.manifest.variants]
        + ["fresh_cases"] * len(options.fresh)
        + ["batch_invariance"] * len(options.batch)
    )
    marks: list[tuple[str, float]] = [("candidate_inputs", started), ("candidate_start", time.perf_counter())]

    def moved(position: object) -> None:
        if isinstance(position, int) and position >= 0:  # the candidate's process writes it: any int may come
            marks.append((f"run:{parts[position]}" if position < len(ids) else "stress", time.perf_counter()))
            progress.step("candidate", min(position, len(ids)), len(ids), ids[position] if position < len(ids) else "stress run")
            if on_moved is not None:
                on_moved(position)

    progress.step("candidate", 0, len(ids), "starting the candidate's process")
    outcome = run_isolated(
        [sys.executable, "-m", "ferret.sandbox.runner", "job.json"],
        workdir,
        candidate_environment(
            workdir, interpret=options.device == "cpu", compile_flags=contract.backend.compile_flags, view=folder_view(workdir)
        ),
        ProcessOptions(
            contract.budgets.case_timeout_s,
            contract.budgets.candidate_memory_mb,
            confine=True,  # the job's paths are written for the sandbox (`folder_view`)
            hide=hidden_from_candidates(context.gate, context.task.project_root),
            finished_marker=out / wire.DONE_FILE,
            deadline=options.deadline,
            progress_token=lambda: _position(out),
            on_progress=moved,
        ),
    )
    progress.step("candidate", len(ids), len(ids), "done")
    marks.append(("", time.perf_counter()))
    run = _outcome(ids, out, outcome, contract)
    run.phases = [(name, end - begin) for (name, begin), (_, end) in zip(marks, marks[1:], strict=False)]
    return run


def _outcome(ids: list[str], out: Path, outcome: ProcessOutcome, contract: Contract) -> CandidateRun:
    """What the candidate's process left in `out`, and the fault that ended it early, if one did."""
    if (out / wire.LOAD_FILE).exists():
        return _load_failed(ids, read_status(out / wire.LOAD_FILE))
    statuses = {vid: read_status(out / wire.status_file(vid)) for vid in ids if (out / wire.status_file(vid)).exists()}
    stress = _read_stress(out / wire.STRESS_FILE)
    if (out / wire.DONE_FILE).exists() and outcome.kind == "exited":
        return CandidateRun(statuses, stress)
    return _ended_early(ids, statuses, stress, outcome, _position(out), contract)


def _read_stress(path: Path) -> wire.StressResult | None:
    if not path.exists():
        return None
    try:
        return _STRESS.validate_json(path.read_bytes())
    except ValidationError as err:
        return wire.StressResult(error=f"the stress result does not fit the wire: {str(err)[:200]}")


def _not_run(why: str) -> wire.VariantStatus:
    return wire.VariantStatus.failed(wire.FailureKind.NOT_RUN, f"not run: {why}")


def _load_failed(ids: list[str], failure: wire.VariantStatus | None) -> CandidateRun:
    """The candidate could not be loaded: said once, on the first variant; the others were not run."""
    failure = failure or wire.VariantStatus.failed(
        wire.FailureKind.RESULT_MISSING, "the load failure report does not fit the wire"
    )
    fault = RunFault(kind=wire.FailureKind.EXCEPTION, message=failure.message, variant=ids[0], not_run=ids[1:])
    statuses: dict[str, wire.VariantStatus | None] = {ids[0]: failure}
    statuses |= {vid: _not_run(f"the candidate could not be loaded (see {ids[0]})") for vid in ids[1:]}
    return CandidateRun(statuses, None, fault)


def _fault_of(outcome: ProcessOutcome, contract: Contract) -> tuple[FaultKind, str]:
    """(kind, message) of a process that ended before its last result."""
    kinds: dict[str, FaultKind] = {
        "timeout": wire.FailureKind.TIMEOUT,
        "deadline": wire.FailureKind.TIMEOUT,
        "out_of_memory": wire.FailureKind.OUT_OF_MEMORY,
    }
    kind = kinds.get(outcome.kind, wire.FailureKind.CRASH)
    message = outcome.message or f"the candidate's process exited with code {outcome.returncode}"
    if outcome.kind == "timeout":
        message += f" (budgets.case_timeout_s is {contract.budgets.case_timeout_s:g})"
    elif outcome.kind == "deadline":
        message = f"the check's deadline (budgets.check_timeout_s, {contract.budgets.check_timeout_s:g}s) passed: killed"
    return kind, message


def _ended_early(
    ids: list[str],
    statuses: dict[str, wire.VariantStatus | None],
    stress: wire.StressResult | None,
    outcome: ProcessOutcome,
    position: int | None,
    contract: Contract,
) -> CandidateRun:
    """The candidate's process ended before its last result: name the fault on the step it happened in."""
    kind, message = _fault_of(outcome, contract)
    at = 0 if position is None else position
    if at >= len(ids):
        # During the stress run or the teardown: every variant has its result.
        stress = stress or wire.StressResult(error=f"{kind.value}: {message}")
        return CandidateRun(statuses, stress, RunFault(kind=kind, message=message, variant="stress"))
    written = statuses.get(ids[at])
    if written is not None:
        # It wrote this variant's result and stopped (the runner does when a failure left the CUDA context
        # unusable): that failure is the fault.
        kind = wire.FailureKind.EXCEPTION
        message = (
            f"the candidate's process stopped after its failure on {ids[at]} "
            f"({written.kind.value if written.kind else 'ok'}: {written.message[:300]})"
        )
    else:
        where = "while starting or loading the candidate, " if position is None else ""
        statuses[ids[at]] = wire.VariantStatus.failed(kind, f"{where}{message}; last output: {outcome.stderr_tail[-800:]}")
    rest = ids[at + 1 :]
    statuses |= {vid: _not_run(f"the candidate's process ended at {ids[at]} ({kind.value})") for vid in rest}
    return CandidateRun(statuses, stress, RunFault(kind=kind, message=message, variant=ids[at], not_run=rest))
