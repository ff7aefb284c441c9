"""compute-sanitizer's memcheck over the candidate, on the GPU profile.

The runner's guard regions and retired buffers watch the memory the judge hands out (`ferret.sandbox.buffers`). What
the candidate allocates itself (a scratch buffer, a `torch.empty` inside `run`) is watched by no one, and on the GPU the
caching allocator hands a freed block to the next allocation, so a write past a scratch buffer's end, or through a
pointer to one freed since, lands in memory nobody checks. Here the candidate runs once more, on the gate's smallest
case, under `compute-sanitizer --tool memcheck` with PyTorch's caching allocator off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`:
every allocation a cudaMalloc of its own and every free a cudaFree, so the tool knows each buffer's bounds), in the same
sandbox as the runner (`ferret.sandbox.launch.run_isolated`, the same allow-list, audit hooks and environment). Its
report decides: an invalid write is `write_outside_outputs`, an invalid read `out_of_bounds_read`, any other memory
error (a misaligned or illegal address, a hardware exception) `memory_error`. Where the tool is not installed, or gives
no report, the verdict says memcheck did not run, which fails nothing (`MemcheckRecord`).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ferret import wire
from ferret.gate.candidate_run import gate_inputs_file, variant_job
from ferret.gate.context import GateContext
from ferret.gate.inputs import prepare_inputs
from ferret.gate.isolation import hidden_from_candidates
from ferret.gate.models import Detection, MemcheckRecord, VariantRecord
from ferret.sandbox.launch import (
    ProcessOptions,
    ProcessOutcome,
    candidate_environment,
    candidate_file_name,
    candidate_settings,
    folder_view,
    run_isolated,
)

SANITIZER = "compute-sanitizer"
LOG_FILE = "memcheck.log"


@dataclass(frozen=True)
class MemcheckOptions:
    """How memcheck runs: `tool` (None: `find_sanitizer`; it must lie where the sandbox shows the host's files, the
    CUDA toolkit's folders), the longest the run may take (the tool slows kernels many times over, compiling is not
    slowed; the check's deadline still holds, and timing comes after), how many errors it prints whole, how many report
    lines a verdict keeps."""

    enabled: bool = True
    tool: Path | None = None
    timeout_s: float = 180.0
    print_limit: int = 20
    evidence_lines: int = 12


def find_sanitizer(environ: Mapping[str, str] = os.environ) -> Path | None:
    """compute-sanitizer on `PATH`, else under the CUDA toolkit (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda*`, each
    in `bin/` or `compute-sanitizer/`); None where there is none. The program itself, never the toolkit's `bin/`
    wrapper (`_program`)."""
    found = shutil.which(SANITIZER, path=environ.get("PATH", ""))
    if found:
        return _program(Path(found))
    homes = [environ.get("CUDA_HOME", ""), environ.get("CUDA_PATH", "")] + sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    for home in filter(None, homes):
        for place in (Path(home) / "bin" / SANITIZER, Path(home) / "compute-sanitizer" / SANITIZER):
            if place.is_file() and os.access(place, os.X_OK):
                return _program(place)
    return None


def _program(found: Path) -> Path:
    """The program a toolkit's `bin/compute-sanitizer` stands for: there it is a shell script that runs
    `../compute-sanitizer/compute-sanitizer` beside its own real path through `readlink` and `dirname`, and the
    sandbox the candidate runs in has neither (on an H100 it printed "readlink: not found" and no report)."""
    if found.read_bytes()[:2] != b"#!":
        return found
    program = found.resolve().parent.parent / SANITIZER / SANITIZER
    return program if program.is_file() and os.access(program, os.X_OK) else found


@dataclass
class SanitizerError:
    """One error record of the report: its kind (from its first line) and its lines, prefix stripped."""

    kind: Literal["write", "read", "other"]
    lines: list[str] = field(default_factory=list)


@dataclass
class SanitizerReport:
    """The errors read from a memcheck report, its `ERROR SUMMARY` count (None where it printed none) and the tool's
    own messages (`Error: ...`: the tool's trouble, not the candidate's)."""

    errors: list[SanitizerError] = field(default_factory=list)
    summary: int | None = None
    tool_messages: list[str] = field(default_factory=list)


_PREFIX = "========="
_ACCESS = re.compile(r"Invalid __(?:global|shared|local)__ (read|write) of size")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
# Headings that are no error of the candidate's: the banner, the summaries, the application's own exit code.
_NOT_ERRORS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned", "Saved host backtrace")
_TOOL = ("Error:", "Internal Sanitizer Error", "Warning:")


def parse_report(text: str) -> SanitizerReport:
    """A memcheck report: every line of the tool starts with `=========`; a record's first line follows it after one
    space, its details after more (`at kernel+0x70 in file.py:30`, `by thread ...`, `Address ... is out of bounds`).
    Lines without the prefix are the application's own output, interleaved, and ignored."""
    report = SanitizerReport()
    current: SanitizerError | None = None
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX) :]
        line = body.strip()
        if not line:
            current = None
        elif summary := _SUMMARY.search(line):
            report.summary, current = int(summary[1]), None
        elif body.startswith("  "):
            if current is not None:
                current.lines.append(line)
        elif line.startswith(_TOOL):
            report.tool_messages.append(line)
            current = None
        elif line.startswith(_NOT_ERRORS):
            current = None
        else:
            access = _ACCESS.search(line)
            current = SanitizerError("other" if access is None else access[1], [line])  # type: ignore[arg-type]
            report.errors.append(current)
    return report


def record_of(report: SanitizerReport, tool: Path, variant: str, seconds: float, evidence_lines: int = 12) -> MemcheckRecord:
    """The verdict's record of a report that was read: how many errors of each kind, and the first lines of the first
    errors (each error's heading, where it was, by which thread, the address and its nearest allocation) as evidence."""
    evidence: list[str] = []
    for error in report.errors:
        evidence += error.lines[:5]
        if len(evidence) >= evidence_lines:
            break
    counts = {kind: sum(1 for e in report.errors if e.kind == kind) for kind in ("write", "read", "other")}
    return MemcheckRecord(
        ran=True,
        tool=str(tool),
        variant=variant,
        errors=max(report.summary or 0, len(report.errors)),
        writes=counts["write"],
        reads=counts["read"],
        other=counts["other"],
        evidence=evidence[:evidence_lines],
        seconds=round(seconds, 3),
    )


_SLUGS = (
    ("writes", "write_outside_outputs", [23], "invalid write(s)"),
    ("reads", "out_of_bounds_read", [6, 23], "invalid read(s)"),
    ("other", "memory_error", [], "other memory error(s)"),
)


def detections_of(record: MemcheckRecord) -> list[Detection]:
    """What memcheck's record rejects: each kind of error it counted, named with the report's first lines."""
    if not record.ran:
        return []
    where = f"compute-sanitizer memcheck on {record.variant} (PyTorch's caching allocator off)"
    lines = " | ".join(record.evidence)[:600]
    found = []
    for count_field, slug, catalogue, words in _SLUGS:
        count = getattr(record, count_field)
        if count:
            found.append(
                Detection(cheat=slug, catalogue=catalogue, source="runtime", evidence=f"{where}: {count} {words}: {lines}")
            )
    if record.errors and not found:  # counted in the summary, none printed whole (past `print_limit`)
        found.append(
            Detection(cheat="memory_error", catalogue=[], source="runtime", evidence=f"{where}: {record.errors} error(s)")
        )
    return found


def smallest_variant(context: GateContext) -> VariantRecord:
    """The gate's variant whose inputs are smallest, a correctness one where there is one: the tool slows every
    kernel, and one case shows what a kernel does at its edges as well as a large one."""
    records = context.manifest.variants
    preferred = [r for r in records if r.part == "correctness"] or records
    return min(preferred, key=lambda r: r.inputs.nbytes)


def _job(context: GateContext, candidate: Path, workdir: Path, record: VariantRecord) -> None:
    """The candidate's folder for the run under the tool: the candidate, the variant's inputs, and a job of one fast
    call, traced and no-op calls as the runner makes them; the process exits by itself after its last result, so
    that the tool writes its summary (the results are not judged: the report is)."""
    contract = context.contract
    target = gate_inputs_file(workdir, record.id)
    target.parent.mkdir(exist_ok=True)
    prepare_inputs(contract, context.gate, record, target)
    loaded = workdir / candidate_file_name(candidate)
    shutil.copyfile(candidate, loaded)
    case = next(c for c in contract.cases_for(context.manifest.profile) if c.name == record.case)
    view = folder_view(workdir)  # the paths as the confined process sees them
    settings = candidate_settings(workdir, compile_flags=contract.backend.compile_flags, view=view)
    settings[wire.SETTING_WAIT_FOR_KILL] = "0"
    wire.CandidateJob(
        candidate=view.seen(loaded),
        entry=contract.candidate_abi.entry,
        device="cuda",
        params=dict(contract.params),
        repeats=1,
        stress_iterations=0,
        stress_variant=None,
        variants=[variant_job(record.id, target, contract, case, record.dtype, view)],
        result_dir=view.seen(workdir / "out"),
        settings=settings,
    ).write(workdir / "job.json")


def _command(tool: Path, options: MemcheckOptions, workdir: Path) -> list[str]:
    return [
        str(tool),
        "--tool",
        "memcheck",
        "--report-api-errors",
        "no",  # an API call that fails and is handled (torch and Triton probe the driver) is no memory error
        "--print-limit",
        str(options.print_limit),
        "--log-file",
        folder_view(workdir).seen(workdir / LOG_FILE),
        sys.executable,
        "-m",
        "ferret.sandbox.runner",
        "job.json",
    ]


def run_memcheck(
    context: GateContext, candidate: Path, options: MemcheckOptions = MemcheckOptions(), deadline: float | None = None
) -> MemcheckRecord:
    """The candidate under memcheck on `smallest_variant`, and the record of what the tool reported."""
    tool = options.tool or find_sanitizer()
    if tool is None:
        return MemcheckRecord(ran=False, reason=f"{SANITIZER} is not on PATH or under the CUDA toolkit: memcheck not run")
    record = smallest_variant(context)
    workdir = Path(tempfile.mkdtemp())  # a plain name: the candidate sees its folder's path
    started = time.perf_counter()
    try:
        _job(context, candidate, workdir, record)
        env = candidate_environment(
            workdir, interpret=False, compile_flags=context.contract.backend.compile_flags, view=folder_view(workdir)
        )
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        limits = ProcessOptions(
            options.timeout_s,
            context.contract.budgets.candidate_memory_mb,
            confine=True,  # the job's paths are written for the sandbox (`folder_view`)
            hide=hidden_from_candidates(context.gate, context.task.project_root),
            deadline=deadline,
        )
        outcome = run_isolated(_command(tool, options, workdir), workdir, env, limits)
        log = workdir / LOG_FILE
        text = log.read_text(errors="replace") if log.is_file() else ""
        return decide(parse_report(text), outcome, tool, record.id, time.perf_counter() - started, options)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def decide(
    report: SanitizerReport, outcome: ProcessOutcome, tool: Path, variant: str, seconds: float, options: MemcheckOptions
) -> MemcheckRecord:
    """The record of one run under the tool. Errors it printed are the candidate's, however the run ended; a run that
    printed none and no summary (the tool could not start, the run timed out) is memcheck not run, never a failure."""
    if report.errors or report.summary is not None:
        return record_of(report, tool, variant, seconds, options.evidence_lines)
    why = "; ".join(report.tool_messages)[:300] or f"{outcome.kind}: {outcome.message}".strip(": ")
    return MemcheckRecord(
        ran=False,
        reason=f"{SANITIZER} gave no report ({why}; last output: {outcome.stderr_tail[-300:]})",
        tool=str(tool),
        variant=variant,
        seconds=round(seconds, 3),
    )
