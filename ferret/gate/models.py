"""Typed records of the gate: its manifest, a verdict, and the report that collects verdicts.
Their JSON schemas are published by `ferret schema`."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ferret.gate.metrics import StageMetrics
from ferret.wire import FailureKind

PartName = Literal["correctness", "dtypes", "edge_cases", "fresh_cases", "determinism", "batch_invariance", "integrity", "stress"]
PARTS: tuple[PartName, ...] = (
    "correctness",
    "dtypes",
    "edge_cases",
    "fresh_cases",
    "determinism",
    "batch_invariance",
    "integrity",
    "stress",
)


class Detection(BaseModel):
    """What the gate saw, named: a way of cheating (docs/cheats.md numbering) or a plain failure with its evidence.
    Every failing verdict carries at least one; a passing verdict none."""

    cheat: str = Field(
        description="Slug of what was seen: a cheat (library_call, decoy_kernel, hardcoded_cases, ...) or a plain "
        "failure (math_mismatch, wrong_shape, traced_differs, exception, crash, timeout, out_of_memory, stress_drift, "
        "memory_growth, stress_failed, batch_variant: a request's output alone differs from its rows in the batch, "
        "out_of_bounds_read and memory_error: an invalid read, and any other memory error, compute-sanitizer reported)."
    )
    catalogue: list[int] = Field(description="Entries of docs/cheats.md this evidence points to (empty for a plain failure).")
    evidence: str
    source: Literal["static", "runtime", "outputs", "timing", "run"] = Field(
        description="static: the scan; runtime: a watch in the candidate's process; outputs: the judge's comparison "
        "of its tensors; timing: the timing guards; run: how the candidate's run went (a fault, the stress run)."
    )
    variant: str | None = None
    file: str | None = Field(default=None, description="Static findings: the candidate file the pattern is in.")
    line: int | None = Field(default=None, description="Static findings: its 1-based line.")


class InputRecord(BaseModel):
    stored: bool = Field(description="Inputs stored in the gate; otherwise regenerated from the seed and checked by hash.")
    file: str | None = None
    content_sha256: dict[str, str] = Field(description="Per input, sha256 over dtype, shape and bytes.")
    nbytes: int


class VariantRecord(BaseModel):
    id: str = Field(description="`<case>@<dtype>`")
    case: str
    dtype: str
    part: PartName
    seed: int
    dims: dict[str, int]
    inputs: InputRecord
    golden_file: str


class ProjectLock(BaseModel):
    """The project's files the judge loads for the gate's contract, locked with the gate (ferret.gate.lock)."""

    root: str = Field(description="Absolute folder holding the `tasks` package the contract's entries name.")
    entry_modules: list[str] = Field(description="Modules the contract's entries name: reference, baseline and the oracle check.")
    tolerance_file: str | None = Field(description="The contract's tolerance table file, relative to root; None when inline.")
    files: dict[str, str] = Field(
        description="sha256 by path relative to root: the entry modules, the project-local modules they import "
        "(read from their imports), the packages holding them, and the tolerance file."
    )


class GateManifest(BaseModel):
    schema_version: Literal[1] = 1
    op: str
    profile: Literal["cpu", "gpu"]
    build_key: str = Field(
        description="sha256 of what determines the gate: contract, profile, platform, judge, the project's files."
    )
    contract: dict[str, Any] = Field(description="The resolved contract, pinned.")
    contract_sha256: str
    platform: dict[str, str]
    versions: dict[str, str]
    judge_sources: dict[str, str]
    project: ProjectLock
    reference: dict[str, str]
    validation: dict[str, Any] = Field(description="The reference's check against its oracle, run at build time.")
    variants: list[VariantRecord]
    files: dict[str, str] = Field(description="sha256 of every locked file, by path inside the gate.")


class RunFailure(BaseModel):
    model_config = ConfigDict(use_enum_values=True)  # `kind` kept as its plain name, as the JSON has it

    kind: FailureKind = Field(description="`not_run`: the variant never ran, because of the verdict's `fault`.")
    message: str
    traceback: str | None = None


# The failure kinds that end a candidate's process early (a subset of the wire's one list).
FaultKind = Literal[FailureKind.EXCEPTION, FailureKind.CRASH, FailureKind.TIMEOUT, FailureKind.OUT_OF_MEMORY]


class RunFault(BaseModel):
    """What ended the candidate's run early, named once: the variants after it were not run."""

    model_config = ConfigDict(use_enum_values=True)

    kind: FaultKind
    message: str
    variant: str = Field(description="The variant it happened on (`stress` for the stress run).")
    not_run: list[str] = Field(default_factory=list, description="The variants that did not run because of it.")


class VariantResult(BaseModel):
    id: str
    case: str
    dtype: str
    part: PartName
    passed: bool
    failure: RunFailure | None = None
    stages: list[StageMetrics] = []
    first_failing_stage: str | None = None
    repeats_bitwise_equal: bool | None = None
    traced_equals_fast: bool | None = None
    triton_launches: int | None = None
    kernels: list[str] = []
    aten_compute: dict[str, int] = {}
    host_numerics: dict[str, int] = Field(
        default={},
        description="Floating-point data the candidate's own code took out of its tensors to the host (`.tolist()`, "
        "`.item()`, `.numpy()`, iteration, a copy off the device), by what and `file:line`, with counts.",
    )
    host_cpu_seconds: float | None = Field(
        default=None,
        description="The least CPU time the candidate's process spent in one fast call after the first (all its "
        "threads): a witness of work done on the host, which a kernel's launcher barely needs.",
    )
    detections: list[Detection] = []
    seconds: float | None = None
    phase_seconds: dict[str, float] = Field(
        default={},
        description="Where the variant's seconds went in the candidate's process: inputs, first_call "
        "(with compiling), repeats, traced, noop, to_host, save.",
    )


class PartResult(BaseModel):
    status: Literal["pass", "fail", "skipped"]
    detail: str = ""


class RooflineWork(BaseModel):
    """The least work of one timed case: what any correct kernel must move and compute."""

    bytes: int = Field(description="Bytes no correct kernel can avoid moving (the contract's roofline.bytes).")
    flops: int = Field(description="Floating-point operations it must do (roofline.flops).")
    source: Literal["contract", "generic"] = Field(
        description="contract: the contract's roofline; generic: it declares none, so inputs read once and outputs "
        "written once, 0 flops (in-place inputs left out): a floor that may be far below the real one."
    )
    explanation: str = ""


class ServingTiming(BaseModel):
    """One case as a serving engine runs it (GPU only, `ferret/bench/graph.py`): each implementation's call captured
    in a CUDA graph and replayed, and called plainly from Python."""

    basis: Literal["graph_replay", "eager"] = Field(
        description="What `speedup` compares: graph replay against graph replay where the candidate and the baseline "
        "both capture, per-call eager wall time against eager wall time otherwise."
    )
    speedup: float = Field(description="The baseline's time over the candidate's, on `basis`: the speed the target is held to.")
    replay_ms: dict[str, float] = Field(
        default={}, description="Per implementation that captured: median time of one graph replay, L2 flushed before it."
    )
    eager_ms: dict[str, float] = Field(
        default={}, description="Per implementation: wall time per plain call from Python, host work included, no graph."
    )
    host_share: dict[str, float] = Field(
        default={},
        description="Per implementation: the part of its eager wall time the GPU is not working, 1 - GPU time / eager "
        "time (GPU time: its replay time where it captured, else the gate's event time).",
    )
    not_graph_capturable: dict[str, str] = Field(
        default={}, description="Per implementation whose capture failed: why (the cause, the exception, its source line)."
    )
    replay_answers_checked: int = Field(
        default=0, description="Outputs of the candidate's replays the judge checked against the reference."
    )


class CaseTiming(BaseModel):
    case: str
    candidate_ms: float = Field(
        description="The candidate's per-call GPU time: the mean over its timing processes of "
        "each one's median over its kept rounds."
    )
    baseline_ms: float
    baseline_compiled_ms: float | None = None
    speedup: float
    speedup_vs_compiled: float | None = None
    samples: dict[str, list[float]] = Field(default={}, description="Each implementation's time (ms), one per round.")
    process_ms: dict[str, list[float]] = Field(
        default={},
        description="Per implementation, the median of its kept rounds in each of its timing processes "
        "(the candidate's timers, the reference timers), which take the rounds in turn. Its time is their mean: each "
        "process carries a fixed part of a short call's time, set by where its code and data sit on the GPU.",
    )
    round_spread: dict[str, float] = Field(
        default={},
        description="(slowest - fastest) / median of each implementation's kept rounds: the largest such "
        "spread inside one of its processes.",
    )
    unstable: bool = Field(
        default=False,
        description="The rounds disagree by more than speed.max_round_spread, or the GPU was shared: "
        "the case never counts toward the speed target.",
    )
    unstable_reason: str | None = None
    interfered_rounds: list[int] = Field(
        default=[], description="Rounds dropped: the reference timer's interference probe saw other work on the GPU."
    )
    host_ms: dict[str, float | None] = Field(
        default={}, description="CPU time to enqueue one call of each implementation (None: the call waits for the GPU)."
    )
    late_fraction: dict[str, list[float]] = Field(
        default={},
        description="Per implementation and round, the fraction of its event-timed calls dropped as late: "
        "their launches were not all queued before their start event ran, so the events measured the host. A round "
        "with more than half late is measured by the host and makes the case unstable.",
    )
    spin_ms: dict[str, list[float]] = Field(
        default={},
        description="Per implementation and round, the spin (ms) of the GPU before each timed call, as the "
        "round was last timed: 1.5x the call's host launch time less the flush's, plus 0.1 ms to settle, at least twice "
        "as long after a retry for late calls. A round timed behind another spin than the rest shows it (as each timer "
        "reported it).",
    )
    sm_clock_mhz: dict[str, list[list[int]]] = Field(
        default={},
        description="The GPU's SM clock (NVML, MHz) the judge read at every poll while each round ran, "
        "per role (candidate, reference) and round: [lowest, highest]. A round at other clocks than the rest shows "
        "why it reads apart; it informs and never decides a verdict. Empty without NVML.",
    )
    compile_error: str | None = None
    wall_ms: float | None = None
    floor_ms: float | None = Field(
        default=None, description="The roofline floor: max(bytes / datasheet bandwidth, flops / datasheet bf16 rate)."
    )
    fraction_of_floor: float | None = Field(
        default=None, description="floor_ms / candidate_ms: 1.0 is the physical limit, 0.25 is 4x away from it."
    )
    baseline_fraction_of_floor: float | None = None
    achieved_tb_per_s: float | None = Field(default=None, description="roofline bytes / candidate time, in TB/s.")
    achieved_tflop_per_s: float | None = Field(default=None, description="roofline flops / candidate time, in TFLOP/s.")
    roofline: RooflineWork | None = None
    kernels: dict[str, float] = Field(
        default={},
        description="The candidate's kernels, device us per call (torch.profiler). Names are the candidate's "
        "own text: they inform an optimizer and never decide a verdict.",
    )
    pool_sets: int | None = None
    persisting_l2: str | None = None
    answers_checked: int | None = Field(
        default=None,
        description="Timed calls whose answer, as left in its output buffer, the judge checked against the reference.",
    )
    flags: list[str] = []
    review: list[str] = []
    serving: ServingTiming | None = Field(
        default=None, description="Serving-true timing: CUDA-graph replay and eager wall time (None: not measured)."
    )
    process_seconds: dict[str, float] = Field(
        default={},
        description="Where each timing process's time on this case went, by part (`<role>:<part>`: load, "
        "pool, warm_up with compiling, host_time; and the candidate's post-round checks: wall, replay, answers, kernels).",
    )


class TimingResult(BaseModel):
    measured: bool
    reason: str = ""
    device: str | None = None
    method: str = ""
    cases: list[CaseTiming] = []
    min_speedup_required: float | None = None
    target_met: bool | None = Field(
        default=None, description="Every speed case stable and at least min_speedup_required over the baseline."
    )
    geomean_speedup: float | None = Field(
        default=None, description="Geometric mean over the stable cases of the speedup the target is held to."
    )
    speed_basis: Literal["graph_replay", "eager", "mixed", "gpu_events"] | None = Field(
        default=None,
        description="What the target compared: graph replay against replay (every case captured on both sides), eager "
        "wall time (none did), mixed (each case as its `serving.basis` says), or the gate's event times (serving "
        "timing missing).",
    )
    serving_measured: bool = Field(default=False, description="CUDA-graph replay and eager wall time were measured.")
    serving_reason: str = Field(default="", description="Why serving timing was not measured (the CPU profile).")
    unstable_cases: list[str] = Field(default=[], description="Cases whose rounds disagreed: they do not count.")
    roofline_source: Literal["contract", "generic"] | None = Field(
        default=None, description="generic: the contract declares no roofline, so the floor is today's generic count."
    )
    detections: list[Detection] = Field(default_factory=list, description="Cheats the timing guards saw (reject).")
    review: list[str] = Field(default_factory=list, description="Not rejections: things a reviewer should look at.")
    process_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Where the timing processes' time went, on the judge's clock: setup (starting, loading the "
        "pools, warming up, torch.compile of the baseline), rounds (the timed rounds), post (the checks after each "
        "case's rounds).",
    )


class PhaseTime(BaseModel):
    """Wall-clock seconds one phase of a check took in the judge's process (`Verdict.phases`)."""

    name: str = Field(description="e.g. static_scan, fresh_draw, candidate_start, run:correctness, compare:edge_cases.")
    seconds: float


class SandboxRecord(BaseModel):
    """How the processes that ran candidate code were confined on this machine (`ferret.sandbox.launch`)."""

    kind: Literal["bubblewrap", "mount_namespace", "mount_namespace_deny_list", "none"] = Field(
        description="bubblewrap: bwrap showing only the allow-list; mount_namespace: util-linux's unshare building "
        "the same allow-list root by hand (the fallback); mount_namespace_deny_list: only the gates, the trust "
        "registry and tasks/ hidden (the older fallback); none: no sandbox, the audit hooks alone."
    )
    allow_list: bool = Field(description="The process saw only the allow-listed host paths and its own folder.")
    audit_hooks: bool = Field(description="The audit hooks ran in the process (off only by the judge's operator).")
    shown: list[str] = Field(
        default_factory=list,
        description="Host paths shown read-only under an allow-list (the runtime, its libraries, the toolchain); the "
        "process's own folder, /dev, /proc, /sys and /tmp aside.",
    )
    skipped: dict[str, str] = Field(
        default_factory=dict,
        description="Sandboxes tried first on this machine that failed their probe, with why (on a GPU machine the probe "
        "also compiles and runs a Triton kernel inside the sandbox): the next one that worked was used.",
    )


class MemcheckRecord(BaseModel):
    """compute-sanitizer's memcheck over the candidate's calls on one small case, with PyTorch's caching allocator off,
    in the same sandbox as the runner (`ferret.gate.memcheck`): what ran, or why it did not."""

    ran: bool = Field(description="The sanitizer ran the candidate and its report was read.")
    reason: str = Field(default="", description="Why memcheck did not run or gave no report (not a failure).")
    tool: str | None = Field(default=None, description="The compute-sanitizer executable used.")
    variant: str | None = Field(default=None, description="The case variant run under it.")
    errors: int = Field(default=0, description="Errors the sanitizer reported (its summary, else the records read).")
    writes: int = Field(default=0, description="Invalid writes among them: `write_outside_outputs`.")
    reads: int = Field(default=0, description="Invalid reads among them: `out_of_bounds_read`.")
    other: int = Field(default=0, description="Other memory errors (misaligned, illegal address, ...): `memory_error`.")
    evidence: list[str] = Field(default_factory=list, description="The first lines of the first errors, as reported.")
    seconds: float = 0.0


class Verdict(BaseModel):
    """One judgement of one candidate against one gate."""

    schema_version: Literal[1] = 1
    passed: bool = Field(description="Correct on every verification part that ran (timing aside).")
    first_failing_stage: str | None
    gate_hash: str
    op: str
    profile: str
    candidate_path: str
    candidate_sha256: str
    parts: dict[str, PartResult]
    detections: list[Detection] = Field(default_factory=list, description="Every named cheat the gate saw evidence of.")
    variants: list[VariantResult]
    timing: TimingResult
    device: str
    versions: dict[str, str]
    seeds: dict[str, int]
    isolation: str = Field(default="", description="How the candidate's process was isolated on this machine.")
    sandbox: SandboxRecord | None = Field(
        default=None,
        description="Which sandbox confined the processes running candidate code (absent in verdicts of "
        "versions before it was recorded).",
    )
    fault: RunFault | None = Field(
        default=None,
        description="What stopped the candidate's run early (a load failure, a hang, a crash, memory, the check's "
        "deadline); the variants after it are reported as not run.",
    )
    memcheck: MemcheckRecord = Field(
        default_factory=lambda: MemcheckRecord(ran=False, reason="not recorded (a verdict of an older version)"),
        description="compute-sanitizer's memcheck on the GPU profile, or why it did not run.",
    )
    started_at: str
    seconds: float
    phases: list[PhaseTime] = Field(
        default_factory=list, description="Where the check's seconds went, phase by phase, in the order they ran."
    )


class ReportEntry(BaseModel):
    """One entry of report.json's index: enough to find a verdict and see how it went; the whole verdict is
    in its own file (`file`, relative to the gate's folder)."""

    index: int = Field(description="The verdict's number on this gate, from 0, in the order they were appended.")
    file: str | None = Field(
        description="The whole verdict (the Verdict schema), relative to the gate's folder; "
        "None only for a verdict read from a report of schema 1 not yet rewritten."
    )
    started_at: str
    seconds: float
    candidate_path: str
    candidate_sha256: str
    passed: bool
    first_failing_stage: str | None
    parts: dict[str, str] = Field(description="Each part's status: pass, fail or skipped.")
    detections: list[str] = Field(description="The names (cheat slugs) of everything the gate saw, in order.")
    timed: bool = Field(description="Whether speed was measured.")
    target_met: bool | None = None
    geomean_speedup: float | None = None
    unstable_cases: list[str] = []
    fraction_of_floor: dict[str, float] = Field(default_factory=dict, description="Per timed case.")

    @classmethod
    def of(cls, verdict: Verdict, index: int, file: str | None) -> ReportEntry:
        timing = verdict.timing
        return cls(
            index=index,
            file=file,
            started_at=verdict.started_at,
            seconds=round(verdict.seconds, 3),
            candidate_path=verdict.candidate_path,
            candidate_sha256=verdict.candidate_sha256,
            passed=verdict.passed,
            first_failing_stage=verdict.first_failing_stage,
            parts={k: p.status for k, p in verdict.parts.items()},
            detections=[d.cheat for d in verdict.detections],
            timed=timing.measured,
            target_met=timing.target_met,
            geomean_speedup=timing.geomean_speedup,
            unstable_cases=list(timing.unstable_cases),
            fraction_of_floor={c.case: c.fraction_of_floor for c in timing.cases if c.fraction_of_floor is not None},
        )


class Report(BaseModel):
    """`gates/<hash>/report.json`: the judge's index of the verdicts on this gate, newest last, bounded (the
    newest `INDEX_LIMIT` entries); every verdict whole in its own file under `verdicts/`, which stays."""

    INDEX_LIMIT: ClassVar[int] = 500

    schema_version: Literal[2] = 2
    gate_hash: str
    reference_validation: dict[str, Any] = Field(
        default_factory=dict, description="How the gate's reference was checked against its oracle (from the manifest)."
    )
    verdict_count: int = Field(default=0, description="Every verdict ever appended, the index's oldest included.")
    verdicts: list[ReportEntry] = []


class ReportV1(BaseModel):
    """report.json as written before schema 2 (every verdict whole, inline): still read."""

    schema_version: Literal[1] = 1
    gate_hash: str
    reference_validation: dict[str, Any] = Field(default_factory=dict)
    verdicts: list[Verdict] = []


class _Summary(BaseModel):
    # Errors may be NaN or infinite: kept as such in JSON.
    model_config = ConfigDict(ser_json_inf_nan="constants")


def passed_field() -> Any:
    """`pass` is a Python keyword: the field is `passed`, written `pass` (as on the GATE_RESULT line) and read
    back under either name."""
    return Field(validation_alias=AliasChoices("pass", "passed"), serialization_alias="pass")


class StageSummary(_Summary):
    passed: bool = passed_field()
    rel_l2: float | None = None
    max_abs_rel_peak: float | None = None
    cosine: float | None = None
    worst: dict[str, int] | list[int] | None = Field(default=None, description="Where the worst error sits (failing stages).")
    tolerance: dict[str, float] | None = Field(default=None, description="The bounds it failed (failing stages).")


class CaseSummary(_Summary):
    passed: bool = passed_field()
    failure: str | None = None
    message: str | None = None
    stages: dict[str, StageSummary | Literal["not exposed"]] = {}


class DetectionSummary(_Summary):
    cheat: str
    catalogue: list[int]
    evidence: str


class FaultSummary(_Summary):
    kind: str
    message: str
    variant: str
    not_run: int = Field(description="How many variants did not run because of it.")


class VerdictSummary(_Summary):
    """A verdict in brief: what the `GATE_RESULT` line prints, what the run log keeps per candidate and what
    the optimizer and reviewer are given (never a golden value)."""

    passed: bool = passed_field()
    first_failing_stage: str | None
    gate: str
    candidate_sha256: str
    parts: dict[str, Literal["pass", "fail", "skipped"]]
    detections: list[DetectionSummary] = []
    fault: FaultSummary | None = None
    cases: dict[str, CaseSummary] = {}
    timing: TimingResult

    def as_json(self) -> dict[str, Any]:
        """The `GATE_RESULT` object (plain Python values; NaN stays a float for json.dumps)."""
        return self.model_dump(by_alias=True)
