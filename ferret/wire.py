"""The two process wires, declared once: judge <-> candidate runner, judge <-> timing process.

Both sides import this module. It is standard library only, so the candidate's and the timing process
stay light (they never import pydantic or the judge). The sides write these records as JSON files and
tensors under the keys below in safetensors files; the judge reads everything that comes back as
untrusted and validates it into these types before use (`ferret.gate.wire_check`).

Candidate runner (`python -m ferret.sandbox.runner job.json`), in its own folder:
    job.json                  CandidateJob, written by the judge
    out/current               the step it started last: a variant's index, then len(variants) for stress
    out/load.json             VariantStatus, when the candidate could not be loaded (nothing else ran)
    out/<variant>.json        VariantStatus of each variant
    out/<variant>.safetensors every tensor of the variant, under the keys of `fast_key` ... `after_key`
    out/stress.json           StressResult (GPU)
    out/done                  written last; then the runner waits to be killed
Timing processes (`python -m ferret.bench.process job.json`), two per check (candidate, reference), each
in its own folder:
    job.json                  TimingJob
    ready, go, finished       the step protocol (`timing_steps`): one process on the GPU at a time
    timing.json               TimingResults
    answers-<k>.safetensors   case k's input sets, the answers left in its output slots and the timed calls kept at
                              random with the elements moved for them (`pool_key`, `slot_key`, `sample_key`), and
                              the answers of its CUDA-graph replays (`graph_key`)
    done                      written last; then the process waits to be killed
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class FailureKind(str, Enum):
    """Why a variant did not give a result. The one list: the runner, the judge and the verdict use it."""

    EXCEPTION = "exception"
    CRASH = "crash"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    BAD_OUTPUT = "bad_output"
    INPUT_MUTATED = "input_mutated"
    INTERNAL = "internal"
    THREAD_LEFT_RUNNING = "thread_left_running"
    HARNESS_TAMPERED = "harness_tampered"
    RESULT_MISSING = "result_missing"
    NOT_RUN = "not_run"
    COMPILE_ERROR = "compile_error"  # a CUDA candidate's source NVRTC refused: the message is the compiler's log
    # Refused by the sandbox's audit hooks (`ferret.sandbox.audit`) in a process that runs candidate code.
    PROCESS_SPAWNED = "process_spawned"
    READ_REFUSED = "file_read_refused"
    WRITE_REFUSED = "file_write_refused"
    NATIVE_LOAD_REFUSED = "native_load_refused"
    # The runner's checks of the buffers it handed out (`ferret.sandbox.buffers`).
    OUTPUT_RELABELLED = "output_relabelled"
    WRITE_OUTSIDE_OUTPUTS = "write_outside_outputs"


# --- judge -> candidate runner ---------------------------------------------------------------------

OutputSpec = tuple[list[int], str]  # shape, dtype name ("bfloat16", ...)


@dataclass(frozen=True)
class VariantJob:
    id: str
    inputs_file: str
    outputs: dict[str, OutputSpec]
    inout: list[str]
    in_only: list[str]
    traced: bool = True  # False: no traced call (`Case.traced`)
    repeats: int | None = None  # its fast calls (`Budgets.fast_calls`); None: the job's `repeats`
    # One more fast call, at a place among the repeats drawn from the OS's randomness, on the inputs with a few elements
    # moved (`moved_key`): set where the check times nothing, so no timed call checks a content replay; the judge
    # draws which variants make it.
    moved_call: bool = False


@dataclass(frozen=True)
class CandidateJob:
    candidate: str
    entry: str
    device: str
    params: dict[str, Any]
    repeats: int
    stress_iterations: int
    stress_variant: int | None
    variants: list[VariantJob]
    result_dir: str
    # The judge's settings for the process (`SETTING_*` below, and each backend's, `Backend.configure`): carried here,
    # not in the environment, where the candidate's code could read that it is being judged.
    settings: dict[str, str] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def read(path: Path) -> CandidateJob:
        data = json.loads(path.read_text())
        variants = [VariantJob(**v) for v in data.pop("variants")]
        return CandidateJob(variants=variants, **data)


# Settings of the harness itself in `CandidateJob.settings` and `TimingJob.settings`.
SETTING_WAIT_FOR_KILL = "wait_for_kill"  # "1": after its last result the process waits to be killed by the judge
SETTING_AUDIT = "audit"  # "1": the process installs the sandbox's audit hooks before loading candidate code
# A JSON list of folders, beside its own, that the audit hooks let the process write (`~/.triton` and /tmp, where the
# sandbox shows them as the process's own tmpfs: `ferret.sandbox.view`).
SETTING_OWN_FOLDERS = "own_folders"
# What `sys.argv` says while candidate code runs (and `sys.orig_argv`, with the interpreter first): a process the
# judge starts is named on its command line, and a candidate must not learn from it that it is being judged.
NEUTRAL_ARGV = ("-c",)


# --- candidate runner -> judge ---------------------------------------------------------------------


@dataclass
class VariantStatus:
    """How one variant went in the candidate's process, and what its watches saw."""

    ok: bool
    kind: FailureKind | None = None
    message: str = ""
    traceback: str | None = None
    seconds: float | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)  # where the variant's seconds went (runner.PHASES)
    launches: int | None = None
    kernels: list[str] = field(default_factory=list)
    aten_compute: dict[str, int] = field(default_factory=dict)
    watch_evasion: dict[str, int] = field(default_factory=dict)
    # floating-point data the candidate's own code took to the host, by what and where (ferret/sandbox/host_watch.py)
    host_numerics: dict[str, int] = field(default_factory=dict)
    host_cpu_seconds: float | None = None  # the least CPU time of the process in one call after the first
    noop_error: str | None = None
    # Per call ("fast0", "fast1", ..., "traced"): the pre-fill its outputs got (`ferret.sandbox.buffers.PREFILLS`),
    # and per output how many entries still held it bitwise after the call.
    prefills: dict[str, str] = field(default_factory=dict)
    left_as_filled: dict[str, dict[str, int]] = field(default_factory=dict)

    @staticmethod
    def failed(kind: FailureKind, message: str, traceback: str | None = None) -> VariantStatus:
        return VariantStatus(ok=False, kind=kind, message=message, traceback=traceback)

    def to_json(self) -> str:
        data = asdict(self)
        data["kind"] = self.kind.value if self.kind is not None else None
        return json.dumps(data)


@dataclass
class StressResult:
    variant: str = ""
    iterations: int = 0
    outputs_differing_from_first: int = 0
    memory_growth_bytes: int = 0
    error: str | None = None


CURRENT_FILE = "current"
LOAD_FILE = "load.json"
DONE_FILE = "done"
STRESS_FILE = "stress.json"


def status_file(variant_id: str) -> str:
    return f"{variant_id}.json"


def tensors_file(variant_id: str) -> str:
    return f"{variant_id}.safetensors"


# Tensor keys of a variant's result file.
def fast_key(repeat: int, output: str) -> str:
    """An output of the fast path's `repeat`-th call."""
    return f"fast{repeat}.{output}"


def inout_key(repeat: int, name: str) -> str:
    """An in-place input (the MLA cache) as the `repeat`-th call left it."""
    return f"inout{repeat}.{name}"


def traced_key(output: str) -> str:
    """An output of the traced call (it must equal the fast path's bitwise)."""
    return f"traced.{output}"


def trace_key(stage: str) -> str:
    """An intermediate stage the traced call exposed."""
    return f"trace.{stage}"


def noop_key(output: str) -> str:
    """An output of the call with every Triton launch made a no-op (it must differ)."""
    return f"noop.{output}"


def after_key(name: str) -> str:
    """A read-only input as the first call left it (the judge checks its content hash)."""
    return f"after.{name}"


# --- judge <-> timing process ----------------------------------------------------------------------


@dataclass(frozen=True)
class TimingCaseJob:
    case: str
    pool_file: str
    pool_sets: int
    outputs: dict[str, OutputSpec]
    # Whole input sets of the case drawn afresh by the judge (OS-random seeds: integer inputs differ too), keyed
    # `pool_key`: the CUDA graph captured on the pool is replayed on them (GPU only; empty on the CPU).
    replay_file: str = ""
    replay_sets: int = 0


CANDIDATE_TIMER = "candidate"
REFERENCE_TIMER = "reference"


@dataclass(frozen=True)
class TimingJob:
    """One timing process's job. Several run per check, each in a process of its own: the candidate's timer loads
    the candidate and nothing else; the reference timer loads the baseline (and its torch.compile) and never
    candidate code, so nothing the candidate does can reach the denominator of its speedup."""

    role: str  # CANDIDATE_TIMER or REFERENCE_TIMER
    source: str  # the file to load: the candidate's copy, or the baseline's
    entry: str
    compile: bool  # also time torch.compile of the entry (the reference timer only)
    device: str
    params: dict[str, Any]
    read_only: list[str]
    repeats: int
    cases: list[TimingCaseJob]
    result: str
    # The reference timer's baseline with its project-local imports: `module` imported with `import_root` first
    # on the path (a copy of the project's files it needs). Empty: `source` is one self-contained file.
    import_root: str = ""
    module: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # as `CandidateJob.settings`

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @staticmethod
    def read(path: Path) -> TimingJob:
        data = json.loads(path.read_text())
        cases = [TimingCaseJob(**c) for c in data.pop("cases")]
        return TimingJob(cases=cases, **data)


@dataclass
class ServingTimes:
    """One implementation on one case as a serving engine runs it (GPU only): its call captured in a CUDA graph and
    replayed, and called plainly from Python."""

    eager_ms: float | None = None  # per-call wall time of plain calls back to back, host work included, no graph
    replay_ms: float | None = None  # median time of one graph replay, L2 flushed before it (None: not captured)
    not_capturable: str | None = None  # why the capture failed: the exception, as `<Class>: <message>`
    capture_site: str | None = None  # the source line the failed capture raised at, innermost frame first
    replayed_on: list[str] = field(default_factory=list)  # the input sets replayed, as `graph_key` names them


@dataclass
class TimingCaseResult:
    """One timed case as one timing process saw it; the judge puts the processes' results together and adds
    the floor, the speedups and the answer checks."""

    case: str
    samples: dict[str, list[float]]  # implementation -> one time (ms) per round, in round order
    host_ms: dict[str, float | None]  # implementation -> CPU time to enqueue one call (None: it waits on the GPU)
    pool_sets: int
    persisting_l2: str
    flags: list[str]
    compile_error: str | None = None
    wall_ms: float | None = None  # the candidate's synchronized wall time per call
    answers_file: str | None = None  # the candidate's timed answers
    kernels: dict[str, float] = field(default_factory=dict)  # kernel name -> device us per call (the candidate's)
    probes_ms: list[float] = field(default_factory=list)  # the reference timer's interference probe, around each round
    seconds: dict[str, float] = field(default_factory=dict)  # where this process's time on the case went, by part
    # implementation -> per round, the fraction of its event-timed calls dropped as late (their launches were not
    # all queued before their start event ran: the events measured the host)
    late_fraction: dict[str, list[float]] = field(default_factory=dict)
    # implementation -> per round, the spin (ms) the round's calls were timed behind: longer after a retry for late calls
    spin_ms: dict[str, list[float]] = field(default_factory=dict)
    serving: dict[str, ServingTimes] = field(default_factory=dict)  # implementation -> serving-true times (GPU)


@dataclass
class TimingResults:
    device: str
    cases: list[TimingCaseResult]


# The step protocol of the timing processes: only one of them works on the GPU at any time. A process
# writes the step it is ready for to READY_FILE, waits until the judge writes the same step to GO_FILE, does
# it, and writes it to FINISHED_FILE. Steps: "<case> <round>" for each round, then "<case> post" (the
# candidate's checks of its timed calls), in the order of `timing_steps`.
READY_FILE = "ready"
GO_FILE = "go"
FINISHED_FILE = "finished"


def write_step(path: Path, step: str) -> None:
    """Write a step file whole (a temporary name, then a rename): the other side never reads half a step."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(step)
    os.replace(partial, path)


def timing_steps(cases: int, repeats: int) -> list[str]:
    return [f"{k} {step}" for k in range(cases) for step in [*map(str, range(repeats)), "post"]]


TIMING_RESULT_FILE = "timing.json"


def answers_file(case_number: int) -> str:
    return f"answers-{case_number}.safetensors"


def pool_key(set_index: int, name: str) -> str:
    """Input `name` of the pool's set `set_index` (in the pool file, and again in the answers file)."""
    return f"set{set_index}.{name}"


def parse_pool_key(key: str) -> tuple[int, str] | None:
    """(set index, input name) of a `pool_key`, or None for any other key."""
    match = _POOL_KEY.match(key)
    return (int(match[1]), match[2]) if match else None


def slot_key(slot: int, set_index: int, output: str) -> str:
    """Output `output` as left in output slot `slot` by its last timed call, which answered set `set_index`."""
    return f"slot{slot}.set{set_index}.{output}"


def parse_slot_key(key: str) -> tuple[int, int, str] | None:
    """(slot, set index, output name) of a `slot_key`, or None for any other key."""
    match = _SLOT_KEY.match(key)
    return (int(match[1]), int(match[2]), match[3]) if match else None


# The candidate's timed calls kept at random for the judge, per case and process (`ferret.bench.process.AnswerSample`).
SAMPLED_ANSWERS = 4
CHANGED_AT, CHANGED_TO = "at.", "to."  # prefixes of a sampled call's changed inputs: flat positions, values written


def changed_count(numel: int) -> int:
    """How many elements of a floating-point read-only input trade places before a sampled timed call: one in 1024,
    at least 2 (none in an input of fewer than 2), at most 65536."""
    return 0 if numel < 2 else min(max(2, numel // 1024), 1 << 16)


def sample_key(sample: int, set_index: int, name: str) -> str:
    """Output `name` of sampled timed call `sample`, which answered set `set_index` changed as its
    `CHANGED_AT + input` / `CHANGED_TO + input` entries say (flat positions, the values written there)."""
    return f"sample{sample}.set{set_index}.{name}"


def parse_sample_key(key: str) -> tuple[int, int, str] | None:
    """(sample, set index, name) of a `sample_key`, or None for any other key."""
    match = _SAMPLE_KEY.match(key)
    return (int(match[1]), int(match[2]), match[3]) if match else None


def moved_key(name: str) -> str:
    """An output of the call on moved inputs (`VariantJob.moved_call`), or `CHANGED_AT + input` / `CHANGED_TO +
    input`: the judge reads it as sampled call 0 on set 0, the variant's own inputs (`parse_sample_key`)."""
    return sample_key(0, 0, name)


POOL_SET, FRESH_SET = "pool", "fresh"  # where a replayed input set comes from: the pool, or `replay_file`


def graph_key(source: str, set_index: int, output: str) -> str:
    """Output `output` of a CUDA-graph replay on input set `set_index` of `source` (POOL_SET or FRESH_SET), copied
    into the captured buffers."""
    return f"graph.{source}{set_index}.{output}"


def parse_graph_key(key: str) -> tuple[str, int, str] | None:
    """(source, set index, output name) of a `graph_key`, or None for any other key."""
    match = _GRAPH_KEY.match(key)
    return (match[1], int(match[2]), match[3]) if match else None


_GRAPH_KEY = re.compile(r"^graph\.(pool|fresh)(\d+)\.(.+)$")
_SAMPLE_KEY = re.compile(r"^sample(\d+)\.set(\d+)\.(.+)$")
_POOL_KEY = re.compile(r"^set(\d+)\.(.+)$")
_SLOT_KEY = re.compile(r"^slot(\d+)\.set(\d+)\.(.+)$")
