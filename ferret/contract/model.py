"""The constraint contract: what a candidate kernel must compute, on which cases, how fast.

One YAML file per op (`contracts/<op>.yaml`) is loaded into these models. Everything the gate and the
judge do is driven by this data; nothing about an op is hard-coded in the judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, WithJsonSchema, field_validator, model_validator

from ferret.backends import registry as _languages
from ferret.contract import roofline as _roofline
from ferret.contract import strata as _strata
from ferret.contract.shapes import ShapeExpr, check_expression, evaluate, evaluate_shape
from ferret.contract.strata import Boundary

SCHEMA_VERSION = 1

DType = Literal[
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32", "int16", "int8", "bool"
]
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
# Storage-only dtypes: an input in one of them holds codes that mean something only with their scales (`Input.scales`),
# so no input may take one without its scales, and no dtype variant, `$dtype` input or output may be one. Each with its
# largest finite value, which a block's largest magnitude is scaled to.
FLOAT8_MAX: dict[str, float] = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# The placeholder an input's dtype may take to follow the case's dtype variant (see Contract.dtypes).
DTYPE_VARIANT = "$dtype"
# The two case profiles: `cpu` (the Triton interpreter) and `gpu` (production shapes).
ProfileName = Literal["cpu", "gpu"]

_NAME = r"^[a-z_][a-z0-9_]*$"
_IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class _Strict(BaseModel):
    # Unknown keys are errors: a typo in a contract must never silently weaken a gate.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Target(_Strict):
    op: str = Field(description="The operation the candidate implements.")
    scope: str = Field(description="What the candidate covers, from which inputs to which outputs.")
    replaces: str = Field(description="The kernel (or eager code) the candidate replaces in production.")


class Baseline(_Strict):
    entry: str = Field(pattern=_IMPORT_PATH, description="`module:function` following the candidate ABI.")
    description: str = ""
    compile: bool = Field(default=True, description="Also time torch.compile of the baseline, reported beside it.")


class Validation(_Strict):
    oracle: str = Field(description="The independent implementation the reference was checked against.")
    check: str | None = Field(
        default=None,
        pattern=_IMPORT_PATH,
        description="`module:function` returning a dict with a boolean `passed`; run and recorded at gate build.",
    )
    test: str = Field(description="The test that performs the validation in CI.")
    tolerance: float = Field(gt=0, description="Agreement required with the oracle (relative).")


class Reference(_Strict):
    entry: str = Field(pattern=_IMPORT_PATH, description="`module:function` returning every stage.")
    precision: Literal["float64", "float32"] = Field(
        default="float64", description="Accumulation precision of the canonical reference."
    )
    golden_dtype: Literal["float64", "float32"] = Field(
        default="float32", description="Dtype golden stage values are stored in inside the gate."
    )
    validation: Validation
    supported_dims: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="Dims whose values the reference supports only in a range: dim -> [low, high], inclusive (the "
        "query tokens per request of a multi-token step, say). A declared case, or a fresh range, outside it is a "
        "contract error naming the case's dim.",
    )

    @field_validator("supported_dims")
    @classmethod
    def _supported_ranges(cls, ranges: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        bad = [f"{dim}: [{low}, {high}]" for dim, (low, high) in ranges.items() if not 1 <= low <= high]
        if bad:
            raise ValueError(f"need 1 <= low <= high, got {', '.join(bad)}")
        return ranges


class Tolerance(_Strict):
    """Bounds on the error of one stage against the reference. Every bound given must hold."""

    rel_l2: float | None = Field(default=None, gt=0, description="||x - ref|| / ||ref|| over finite entries.")
    max_abs_rel_peak: float | None = Field(
        default=None, gt=0, description="max |x - ref| divided by max |ref| (the error relative to the stage's scale)."
    )
    cosine_min: float | None = Field(default=None, gt=-1, le=1, description="Minimum cosine similarity with ref.")
    max_row_rel: float | None = Field(
        default=None,
        gt=0,
        description="For a stage of two or more axes: the largest ||x - ref|| / ||ref|| of any one row (each vector "
        "along the last axis: a row, one request's head, one head's scores), its norm taken as at least the row's "
        "error scale and scale_floor per entry. The stage-wide bounds average a row's error with every other row's; "
        "a kernel wrong on one row in many (a long row, one request) hides under them, not under this.",
    )
    scale_floor: float | None = Field(
        default=None,
        gt=0,
        description="The stage's scale is taken as at least this per entry, in the stage's own units: rel_l2 divides by "
        "max(||ref||, scale_floor * sqrt(entries)), max_abs_rel_peak by max(max |ref|, scale_floor), and below it the "
        "cosine is not judged. For a stage whose values can all be near zero at once (a few dot products: MLA's scores "
        "of one request, one head, one token), whose error does not shrink with its values; set near the stage's "
        "typical magnitude, it changes nothing on ordinary cases.",
    )
    peak_floor: float | None = Field(
        default=None,
        gt=0,
        description="max_abs_rel_peak divides by at least this (and by at least scale_floor), in the stage's own units. "
        "The peak of a stage of a few entries (MLA's scores of one token) is one draw of its values, not the stage's "
        "peak: against it, an error the honest kernels make on every case reads several times larger than on the "
        "cases the table was derived from. Set below the peaks of those cases, it changes nothing on them.",
    )

    @model_validator(mode="after")
    def _at_least_one(self) -> Tolerance:
        if self.rel_l2 is None and self.max_abs_rel_peak is None and self.cosine_min is None:
            raise ValueError("a tolerance needs at least one of rel_l2, max_abs_rel_peak, cosine_min")
        return self


class ToleranceTable(_Strict):
    provenance: str = Field(description="How the numbers were derived: method, implementation, seeds, margin, date.")
    by_dtype: dict[str, dict[str, Tolerance]] = Field(description="dtype -> stage -> tolerance.")
    false_rejection: dict[str, Any] = Field(
        default_factory=dict, description="Measured rate at which honest candidates were rejected, per candidate."
    )
    observed: dict[str, Any] = Field(
        default_factory=dict, description="The largest honest errors the table was derived from (dtype -> stage -> metric)."
    )
    by_case: dict[str, dict[str, dict[str, Tolerance]]] = Field(
        default_factory=dict,
        description="case -> dtype -> stage -> tolerance, for a frozen case whose faithful error is far below the "
        "table's (the table is set by the worst case, and a cut that would show on a well-conditioned case hides under "
        "it). Only tighter: every bound must be no looser than by_dtype's. Never used for a fresh case, whatever its name.",
    )

    @model_validator(mode="after")
    def _by_case_only_tighter(self) -> ToleranceTable:
        for case, dtypes in self.by_case.items():
            for dtype, stages in dtypes.items():
                for stage, tol in stages.items():
                    if _looser(tol, self.by_dtype.get(dtype, {}).get(stage)):
                        raise ValueError(f"by_case.{case}.{dtype}.{stage}: looser than (or absent from) by_dtype")
        return self


def _looser(tol: Tolerance, general: Tolerance | None) -> bool:
    """Whether `tol` admits anything `general` rejects, bound by bound (a missing bound admits everything)."""
    if general is None:
        return True
    pairs = [
        (tol.rel_l2, general.rel_l2, 1),
        (tol.max_abs_rel_peak, general.max_abs_rel_peak, 1),
        (tol.cosine_min, general.cosine_min, -1),
        # A case row without a row bound takes the general one (`Contract.tolerance`): only a larger one loosens.
        (tol.max_row_rel, general.max_row_rel if tol.max_row_rel is not None else None, 1),
    ]
    if any(g is not None and (t is None or (t - g) * sign > 0) for t, g, sign in pairs):
        return True
    return tol.scale_floor != general.scale_floor


class Stage(_Strict):
    name: str = Field(pattern=_NAME)
    computes: str = Field(description="What the stage computes, in words and formulas.")
    shape: list[ShapeExpr] = Field(description="Shape as expressions over the case dims.")
    dims: list[str] | None = Field(
        default=None, description="A name per axis (e.g. batch, head, token), used to locate the worst error."
    )
    ignore_where_reference: Literal["-inf", "inf", "nan"] | None = Field(
        default=None,
        description="Entries where the reference holds this value are not compared (a defined don't-care "
        "region, such as masked scores); everywhere else the NaN/Inf policy is strict.",
    )
    error_scale: str | None = Field(
        default=None,
        pattern=_NAME,
        description="The name of a value the reference returns beside the stages, of the stage's shape: each entry's "
        "error scale, the size its honest rounding error is proportional to whatever its own value. For a dot product, "
        "the L2 norm of its terms, ||q * k||: a kernel's error (its operands rounded, each term off by a relative "
        "rounding) is that norm times a rounding unit, while terms that cancel can leave the product itself near zero. "
        "The stage's norm and peak are judged against at least this one's (ferret/gate/metrics.py); it is stored with "
        "the golden values and never reaches the candidate.",
    )

    exact_within: str | None = Field(
        default=None,
        pattern=_NAME,
        description="The name of a value the reference returns beside the stages, of the stage's shape: each entry's "
        "largest allowed |candidate - reference|, 0 where the entry must be exact. For a stage that is a rounding the "
        "contract defines (a quantized cache row): exact, but one unit of the format where the value rounded lies so "
        "near a rounding tie that a faithful kernel's own rounding of it may cross. Any entry past its allowance fails "
        "the stage, whatever the other bounds say; stored with the golden values, it never reaches the candidate.",
    )
    informative: bool = Field(
        default=False,
        description="Reported, never judged: its metrics appear in every verdict, and a bound they miss fails nothing "
        "(the distance of a quantized kernel's output to the unquantized math, say). Not an output, not in place.",
    )
    of: str | None = Field(
        default=None,
        pattern=_NAME,
        description="An informative stage's candidate value: the stage of this name (its output, say), compared "
        "with this stage's golden value. Default: the stage itself.",
    )

    @model_validator(mode="after")
    def _dims_match_shape(self) -> Stage:
        if self.dims is not None and len(self.dims) != len(self.shape):
            raise ValueError(f"dims has {len(self.dims)} names but shape has {len(self.shape)} axes")
        if self.of is not None and not self.informative:
            raise ValueError("`of` is for an informative stage (one judged stage is never another's value)")
        return self

    @property
    def candidate_stage(self) -> str:
        """The stage whose candidate value this stage is compared with (`of`, else itself)."""
        return self.of or self.name


class Normal(_Strict):
    kind: Literal["normal"] = "normal"
    mean: float = 0.0
    std: float = Field(default=1.0, gt=0)


class Uniform(_Strict):
    kind: Literal["uniform"] = "uniform"
    low: float = 0.0
    high: float = 1.0


class RandInt(_Strict):
    """Integers in [low, high], bounds inclusive, as expressions over the case dims (e.g. `L - 1`)."""

    kind: Literal["randint"] = "randint"
    low: ShapeExpr
    high: ShapeExpr


class RowScaledNormal(_Strict):
    """Normal rows, each multiplied by a log-uniform factor: rows of mixed magnitude."""

    kind: Literal["row_scaled_normal"] = "row_scaled_normal"
    std: float = Field(default=1.0, gt=0)
    min_scale: float = Field(default=0.01, gt=0)
    max_scale: float = Field(default=100.0, gt=0)


class Constant(_Strict):
    kind: Literal["constant"] = "constant"
    value: float


class BlockScales(_Strict):
    """The scales of a float8 input: one float32 scale per `block` consecutive values along its last axis."""

    input: str = Field(
        pattern=_NAME,
        description="The float32 input holding the scales: the float8 input's shape with its last axis divided by "
        "`block`, and `inout` where the float8 input is. A value means code * its block's scale. When a case is drawn, "
        "the float8 input's values are drawn in float64 from its distribution (edits applied), each block scaled to the "
        "format's largest finite value (scale = amax / max, stored in float32; a block of zeros gets scale 0 and codes 0), "
        "and the scales written here, replacing whatever this input's own distribution drew.",
    )
    block: int = Field(gt=0, description="Values per scale along the last axis (a divisor of its length).")


class Input(_Strict):
    name: str = Field(pattern=_NAME)
    shape: list[ShapeExpr]
    dtype: DType | Literal["$dtype"]
    distribution: Normal | Uniform | RandInt | RowScaledNormal | Constant = Field(discriminator="kind")
    role: Literal["in", "inout"] = Field(
        default="in",
        description="`inout` tensors are updated in place; their contents after the call are the stage of the same name.",
    )
    scales: BlockScales | None = Field(
        default=None,
        description="Required by a float8 dtype (quantized storage, such as an FP8 KV cache) and allowed with no other: "
        "where its scales are and how many values each covers.",
    )


class Output(_Strict):
    name: str = Field(pattern=_NAME)
    shape: list[ShapeExpr]
    dtype: DType | Literal["$dtype"]


class Edit(_Strict):
    """An edge-case edit applied to one drawn input: set rows, values or a fraction of entries."""

    input: str = Field(pattern=_NAME)
    set: Literal["zeros_rows", "value", "nan", "inf", "-inf", "rows_of_inf", "rows_of_neg_inf", "opposing_halves"] = Field(
        description="zeros_rows / rows_of_inf / rows_of_neg_inf: the rows listed in `rows`; value: every entry equals `value` "
        "(an expression over the dims), or with `at` only the entries listed there; nan / inf / -inf: the entries "
        "listed in `at`; opposing_halves: along `axis`, the first half's entries made non-negative (their absolute "
        "values) and the second half's the negation of the first half's, position by position (an odd length leaves "
        "its last entry 0), so that a sum over the axis cancels while a partial sum over either half stays large: "
        "it amplifies the rounding of partial results a kernel carries between splits of that axis."
    )
    rows: list[int] = []
    at: list[list[int]] = []
    value: ShapeExpr | None = None
    axis: int | None = Field(default=None, description="opposing_halves: the axis halved (negative counts from the end).")

    @model_validator(mode="after")
    def _axis_only_for_halves(self) -> Edit:
        if (self.set == "opposing_halves") != (self.axis is not None):
            raise ValueError("`axis` is required by set: opposing_halves and allowed with no other edit")
        return self


class Case(_Strict):
    name: str = Field(pattern=_NAME)
    kind: Literal["correctness", "edge"] = "correctness"
    dims: dict[str, int] = Field(description="Values of the dims that shape expressions use.")
    seed: int = Field(ge=0)
    description: str = ""
    edits: list[Edit] = []
    traced: bool = Field(
        default=True,
        description="Whether the candidate also runs this case traced, its intermediate stages judged; false: its "
        "outputs alone are judged (a case whose point is the output, such as a ragged twin of an amplifying case, "
        "spares the interpreter a traced run of its size; every other check still holds).",
    )

    @field_validator("dims")
    @classmethod
    def _positive(cls, dims: dict[str, int]) -> dict[str, int]:
        bad = [k for k, v in dims.items() if v < 1]
        if bad:
            raise ValueError(f"dims must be >= 1, got {', '.join(f'{k}={dims[k]}' for k in bad)}")
        return dims


class FreshCases(_Strict):
    """Cases the judge draws privately at check time: seeds from the OS, dims uniform in these ranges.

    They exist in no file before the check, so a candidate cannot be fitted to them."""

    count: int = Field(default=2, ge=0, description="Fresh cases per check (primary dtype).")
    cpu: dict[str, tuple[int, int]] = Field(default_factory=dict, description="dim -> [low, high] inclusive, CPU profile.")
    gpu: dict[str, tuple[int, int]] = Field(default_factory=dict, description="dim -> [low, high] inclusive, GPU profile.")

    @model_validator(mode="after")
    def _ranges(self) -> FreshCases:
        for profile in ("cpu", "gpu"):
            for dim, (low, high) in getattr(self, profile).items():
                if not 1 <= low <= high:
                    raise ValueError(f"{profile}.{dim}: need 1 <= low <= high, got [{low}, {high}]")
        return self


class BatchInvariance(_Strict):
    """Opt-in: a request's output must not depend on which other requests share its batch."""

    dim: str = Field(
        description="The batch dim (a case dim). The judge runs the profile's first correctness case's first and last "
        "requests alone (this dim = 1, sliced from the case's inputs along every input and output axis whose shape "
        "entry is exactly this dim, in-place inputs included; inputs without it passed unchanged) and requires their "
        "outputs and in-place inputs to be bitwise equal to the same rows of the full batch (part batch_invariance)."
    )


class Cases(_Strict):
    cpu: list[Case] = Field(description="Small profile that runs on the CPU under the Triton interpreter.")
    gpu: list[Case] = Field(description="Real production shapes, run on the GPU.")
    fresh: FreshCases | None = Field(
        default=None, description="Private cases drawn at check time, checked against the live reference."
    )
    batch_invariance: BatchInvariance | None = Field(
        default=None, description="Off by default: when set, the verdict's part batch_invariance checks it."
    )
    boundaries: list[Boundary] = Field(
        default_factory=list,
        description="Values where correct kernels commonly branch (a block size, a one-block limit, an empty or a "
        "full cache). The test-writer derives the strata of fresh cases from them (ferret/gate/strata.py): both sides "
        "of each, and the lowest two values of each quantity named, are covered by every check.",
    )

    @model_validator(mode="after")
    def _batch_dim(self) -> Cases:
        if self.batch_invariance is not None:
            dim = self.batch_invariance.dim
            for profile in ("cpu", "gpu"):
                first = next((c for c in getattr(self, profile) if c.kind == "correctness"), None)
                if first is None or dim not in first.dims:
                    raise ValueError(f"batch_invariance.dim {dim!r} is not a dim of the first {profile} correctness case")
        return self


class Roofline(_Strict):
    """The least work any correct kernel does on one case, from which the judge's timing floor is derived:
    a time under max(bytes / peak bandwidth, flops / peak rate) is impossible.

    Both are expressions: numbers, + - * / // ** and parentheses; names are the case's dims, the contract's
    numeric top-level params and its inputs (tensors of the case's values); functions sum(t), min(...),
    max(...), numel(name), nbytes(name). Each is evaluated on every declared case when the contract loads,
    with every input at the low and then at the high end of its distribution's range (randint and uniform:
    their bounds; constant: its value; normal and row_scaled_normal: 0 and 1): one that divides by zero,
    comes out negative or names something unknown is a contract error there."""

    bytes: str = Field(
        description="Bytes no correct kernel can avoid moving between memory and the chip on one case. Names: "
        "dims (`B`), numeric params (`kv_lora_rank`), inputs as tensors of the case's values, for elementwise "
        "arithmetic and reductions (`sum(cache_lens + 1) * 1152`); functions: sum(t); min(...) and max(...) (of "
        "one tensor: its smallest or largest entry, of several values: elementwise); numel(name) and nbytes(name) "
        "(an input's or output's element count and size in bytes at the case's dtype variant). Must come out "
        "finite and >= 0; rounded down to an integer."
    )
    flops: str = Field(
        description="Floating-point operations no correct kernel can avoid on one case (a multiply-add counts 2), "
        "in the same language as `bytes`."
    )
    description: str = Field(
        default="", description="How the terms were counted: what each stands for, and what is counted as a flop."
    )


class CandidateAbi(_Strict):
    entry: str = Field(default="run", pattern=r"^[A-Za-z_]\w*$", description="Function the candidate module defines.")
    signature: str = "run(inputs: dict[str, Tensor], outputs: dict[str, Tensor], params: dict, trace: dict | None = None) -> None"
    outputs_preallocated: bool = Field(
        default=True, description="The judge allocates the outputs, pre-filled with NaN; the candidate writes into them."
    )
    traced_run: str = Field(
        default="With `trace` a dict, the candidate stores every stage it materializes by name; the traced run "
        "must give bitwise the same final outputs as the fast path.",
    )


def _known_language(name: str) -> str:
    if name not in _languages.names():
        raise ValueError(f"unknown language {name!r}; the languages are {', '.join(_languages.names())}")
    return name


# A candidate language: one registered in ferret/backends/registry.py.
Language = Annotated[str, AfterValidator(_known_language), WithJsonSchema({"enum": list(_languages.names()), "type": "string"})]


class Backend(_Strict):
    language: Language = Field(
        default="triton",
        description="What the op's template and honest candidate are "
        "written in; candidates may be written in it, and in `allowed_languages`.",
    )
    allowed_languages: list[Language] = Field(
        default_factory=list,
        description="Languages a candidate may also be written in (`[cuda]`: CUDA C++ through "
        "ferret.backends.cuda). A candidate in another language is refused (exit 2).",
    )
    compile_flags: dict[str, Any] = Field(
        default_factory=dict,
        description="CUDA candidates' NVRTC options, by NVRTC's names: {std: c++17, "
        "use_fast_math: true}; true alone, false left out. Empty: -std=c++17.",
    )
    interpret_on_cpu: bool = Field(default=True, description="Run Triton under TRITON_INTERPRET=1 where there is no GPU.")

    def allows(self, language: str) -> bool:
        return language == self.language or language in self.allowed_languages


class Speed(_Strict):
    min_speedup: float = Field(gt=0, description="Minimum speedup over the baseline, measured in the same run.")
    cases: list[str] = Field(default_factory=list, description="GPU cases timed; all GPU cases when empty.")
    repeats: int = Field(default=5, ge=1, description="Interleaved rounds of candidate and baseline timing; median taken.")
    max_round_spread: float = Field(
        default=0.10,
        gt=0,
        le=1,
        description="Most the rounds of one implementation on one case may disagree ((slowest - fastest) / median). "
        "A case past it is marked unstable and never counts toward the speed target.",
    )
    graph_capture: Literal["require", "warn"] = Field(
        default="warn",
        description="A candidate whose call cannot be captured in a CUDA graph (a host synchronization, `.item()`, a "
        "CPU-GPU copy inside it): `require` rejects it as `not_graph_capturable`; `warn` reports it for review and "
        "compares its speed eagerly. Serving engines run decode inside CUDA graphs.",
    )


class AuditTarget(_Strict):
    min_score: float = Field(
        ge=0,
        le=1,
        description="Least mutation score (harmful mutants the gate rejects / harmful mutants, `ferret gate audit`) "
        "the gate's last audit must reach before `ferret dispatch` calls a run accepted.",
    )


class Budgets(_Strict):
    case_timeout_s: float = Field(
        default=300,
        gt=0,
        description="Longest a candidate's process may take over one case variant (its first variant also covers "
        "starting, loading and compiling; the stress run counts as one more). A candidate that goes past it is "
        "rejected as a timeout there, and the variants after it are reported as not run.",
    )
    check_timeout_s: float = Field(
        default=3600,
        gt=0,
        description="Deadline for a whole check of one candidate: every variant, the stress run and the timing. "
        "What has not run by then is reported as not run.",
    )
    candidate_memory_mb: int = Field(default=16384, gt=0, description="Host memory (RSS) for one candidate process.")
    determinism_repeats: int = Field(default=3, ge=2, description="Fast-path runs that must agree bitwise.")
    stress_iterations: int = Field(default=200, ge=1, description="Iterations of the stress stage (GPU only).")
    max_rounds: int = Field(default=8, ge=1, description="Optimizer rounds (used by the dispatcher).")
    proposals_per_round: int = Field(
        default=4, ge=1, description="Most candidates judged per round (the dispatcher judges the optimizer's first ones)."
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_timeout(cls, data: Any) -> Any:
        if isinstance(data, dict) and "candidate_timeout_s" in data:
            raise ValueError(
                "candidate_timeout_s was replaced by case_timeout_s (longest time on one case variant) and "
                "check_timeout_s (deadline of the whole check)"
            )
        return data

    def fast_calls(self, part: str, traced: bool) -> int:
        """The fast calls of one variant that must agree bitwise: `determinism_repeats`; a traced fresh case's one
        fewer (at least two), since its traced call must agree with them bitwise too and fresh cases are most of a
        check's time (DESIGN.md, "The judge")."""
        if part == "fresh_cases" and traced:
            return max(2, self.determinism_repeats - 1)
        return self.determinism_repeats

    @model_validator(mode="after")
    def _case_fits_in_check(self) -> Budgets:
        if self.case_timeout_s > self.check_timeout_s:
            raise ValueError(
                f"case_timeout_s ({self.case_timeout_s:g}) is longer than check_timeout_s ({self.check_timeout_s:g})"
            )
        return self


class Layout(_Strict):
    """Inputs that no distribution draws one by one, because their values depend on each other (a paged cache:
    the block table names the pages each request owns, and the pages nobody owns hold NaN)."""

    entry: str = Field(
        pattern=_IMPORT_PATH,
        description="`module:function(inputs, dims, generator) -> None`, called on every drawn case (frozen and fresh) "
        "after its edits, with the inputs in their dtypes on the CPU: it rewrites them in place, drawing only from "
        "`generator` (seeded from the case's seed), so a case gives the same tensors on every machine.",
    )
    description: str = ""


class Contract(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    op: str = Field(pattern=_NAME)
    description: str = ""
    project: str | None = Field(
        default=None,
        description="Absolute folder holding the `tasks` package that the entries name. Written into contracts the "
        "dispatcher derives under runs/; default: the nearest folder above the contract file that holds one.",
    )
    target: Target
    baseline: Baseline
    reference: Reference
    params: dict[str, Any] = Field(default_factory=dict, description="Constants of the math, given to every implementation.")
    dtypes: list[DType] = Field(description="Dtype variants; the first is the primary one. Inputs typed `$dtype` follow it.")
    inputs: list[Input]
    outputs: list[Output]
    stages: list[Stage] = Field(description="The real-math contract, in order; outputs are its last stages.")
    roofline: Roofline | None = Field(
        default=None,
        description="The least bytes and flops a correct kernel needs on a case, as expressions over its dims, "
        "params and input values. Without it the generic count applies: each read-only input read once and "
        "each output written once, 0 flops (in-place inputs are left out).",
    )
    tolerances: ToleranceTable | None = Field(
        default=None,
        description="Per dtype and stage; derived by `ferret calibrate`, never by hand. In YAML either inline or "
        "the name of a file beside the contract (`<op>.tolerances.yaml`), which is what calibrate writes.",
    )
    cases: Cases
    layout: Layout | None = Field(
        default=None, description="A task function that arranges inputs the distributions cannot draw one by one."
    )
    candidate_abi: CandidateAbi = CandidateAbi()
    # The folder whose `tasks` package the contract's entries name: set by load_contract from the file's place.
    _project_root: Any = PrivateAttr(default=None)

    @property
    def source_root(self) -> Any:
        """The folder whose `tasks` package the entries name (None for a contract not loaded from a file)."""
        return self._project_root

    backend: Backend = Backend()
    speed: Speed
    budgets: Budgets = Budgets()
    audit: AuditTarget | None = Field(
        default=None, description="What the gate's mutation audit must show (`ferret gate audit`); none asked when absent."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Contract:
        problems: list[str] = []
        stage_names = [s.name for s in self.stages]
        input_names = [i.name for i in self.inputs]
        input_ranks = {i.name: len(i.shape) for i in self.inputs}
        for what, names in (("stages", stage_names), ("inputs", input_names), ("outputs", [o.name for o in self.outputs])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                problems.append(f"{what}: duplicate names {dup}")
        for out in self.outputs:
            if out.name not in stage_names:
                problems.append(f"outputs.{out.name}: every output must also be a stage")
        problems += [
            f"stages.{s.name}.{field}: {value!r} names a stage or an input"
            for s in self.stages
            for field, value in (("error_scale", s.error_scale), ("exact_within", s.exact_within))
            if value in stage_names + input_names
        ]
        problems += self._storage_problems() + self._informative_problems() + self._supported_dim_problems()
        for inp in self.inputs:
            if inp.role == "inout" and inp.name not in stage_names:
                problems.append(f"inputs.{inp.name}: an inout input must also be a stage (its contents after the call)")
        tolerance_table = self.tolerances.by_dtype if self.tolerances else {}
        for dtype, table in tolerance_table.items():
            if dtype not in self.dtypes:
                problems.append(f"tolerances.by_dtype.{dtype}: not one of dtypes {self.dtypes}")
            for stage in table:
                if stage not in stage_names:
                    problems.append(f"tolerances.by_dtype.{dtype}.{stage}: no such stage")
        for dtype in self.dtypes if self.tolerances else ():
            missing = [s for s in stage_names if s not in tolerance_table.get(dtype, {})]  # the table is self.tolerances'
            if missing:
                problems.append(f"tolerances.by_dtype.{dtype}: no tolerance for stages {missing}")
        frozen_names = {case.name for case in self.cases.cpu + self.cases.gpu}
        for case_name in self.tolerances.by_case if self.tolerances else ():
            if case_name not in frozen_names:  # a fresh case must never be judged by a frozen case's row
                problems.append(f"tolerances.by_case.{case_name}: not a frozen case of this contract")
        dims_used = {d for case in self.cases.cpu + self.cases.gpu for d in case.dims}
        if self.cases.fresh is not None:
            for profile in ("cpu", "gpu"):
                ranges = getattr(self.cases.fresh, profile)
                profile_dims = {d for case in self.cases_for(profile) for d in case.dims}
                if ranges and set(ranges) != profile_dims:
                    problems.append(f"cases.fresh.{profile}: ranges must cover exactly the dims {sorted(profile_dims)}")
        for profile, cases in (("cpu", self.cases.cpu), ("gpu", self.cases.gpu)):
            names = [c.name for c in cases]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                problems.append(f"cases.{profile}: duplicate case names {dup}")
            for case in cases:
                for edit in case.edits:
                    if edit.input not in input_names:
                        problems.append(f"cases.{profile}.{case.name}.edits: no input named {edit.input!r}")
                    elif edit.axis is not None and not -(rank := input_ranks[edit.input]) <= edit.axis < rank:
                        problems.append(
                            f"cases.{profile}.{case.name}.edits: axis {edit.axis} of {edit.input!r}, which has {rank} axes"
                        )
        for where, exprs in self._shape_expressions():
            for expr in exprs:
                try:
                    check_expression(expr, dims_used)
                except ValueError as err:
                    problems.append(f"{where}: {err}")
        unknown_speed_cases = [c for c in self.speed.cases if c not in {g.name for g in self.cases.gpu}]
        if unknown_speed_cases:
            problems.append(f"speed.cases: not GPU cases {unknown_speed_cases}")
        # The dry run and the boundaries' sides need every shape to evaluate: only when nothing else is wrong.
        if not problems:
            problems += _strata.boundary_problems(
                self.strata_scope(), {p: {d for case in self.cases_for(p) for d in case.dims} for p in ("cpu", "gpu")}
            )
            problems += self._fresh_edit_problems()
        problems += self._roofline_problems(dims_used, dry_run=not problems)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _storage_problems(self) -> list[str]:
        """Float8 is storage with scales: an input in it must name its scales, and nothing else may be float8."""
        problems = [
            f"dtypes: {d} is a storage dtype (an input with its scales), not a variant" for d in self.dtypes if d in FLOAT8_MAX
        ]
        problems += [
            f"outputs.{o.name}.dtype: {o.dtype} is a storage dtype of inputs only" for o in self.outputs if o.dtype in FLOAT8_MAX
        ]
        specs = {i.name: i for i in self.inputs}
        for inp in self.inputs:
            if inp.dtype in FLOAT8_MAX and inp.scales is None:
                problems.append(
                    f"inputs.{inp.name}.scales: a {inp.dtype} input needs its scales ({{input: <float32 input>, block: "
                    "<values per scale>}): float8 codes mean nothing without them"
                )
            elif inp.scales is not None and inp.dtype not in FLOAT8_MAX:
                problems.append(f"inputs.{inp.name}.scales: only a float8 input has scales, this one is {inp.dtype}")
            elif inp.scales is not None:
                problems += _scale_problems(inp, specs.get(inp.scales.input), self.cases.cpu + self.cases.gpu)
        return problems

    def _supported_dim_problems(self) -> list[str]:
        """Every declared case's dims, and every fresh range, inside what the reference supports."""
        problems = []
        supported = self.reference.supported_dims
        for dim, (low, high) in supported.items():
            where = f"reference.supported_dims.{dim} [{low}, {high}]"
            case_dims = {d for case in self.cases.cpu + self.cases.gpu for d in case.dims}
            if dim not in case_dims:
                problems.append(f"reference.supported_dims.{dim}: not a dim of any case")
            for profile in ("cpu", "gpu"):
                for case in self.cases_for(profile):
                    value = case.dims.get(dim)
                    if value is not None and not low <= value <= high:
                        problems.append(f"cases.{profile}.{case.name}.dims.{dim}: {value} is outside what {where} allows")
                fresh = getattr(self.cases.fresh, profile) if self.cases.fresh is not None else {}
                if dim in fresh and not low <= fresh[dim][0] <= fresh[dim][1] <= high:
                    problems.append(f"cases.fresh.{profile}.{dim}: {list(fresh[dim])} reaches outside what {where} allows")
        return problems

    def _informative_problems(self) -> list[str]:
        """An informative stage is no output and no in-place input; its `of` names an earlier stage."""
        problems = []
        outputs_inout = {o.name for o in self.outputs} | {i.name for i in self.inputs if i.role == "inout"}
        seen: list[str] = []
        for stage in self.stages:
            if stage.informative and stage.name in outputs_inout:
                problems.append(f"stages.{stage.name}.informative: an output or in-place input is always judged")
            if stage.of is not None and stage.of not in seen:
                problems.append(f"stages.{stage.name}.of: {stage.of!r} is not an earlier stage")
            seen.append(stage.name)
        return problems

    def _shape_expressions(self):
        for i in self.inputs:
            exprs = list(i.shape)
            if isinstance(i.distribution, RandInt):
                exprs += [i.distribution.low, i.distribution.high]
            yield f"inputs.{i.name}", exprs
        for o in self.outputs:
            yield f"outputs.{o.name}", list(o.shape)
        for s in self.stages:
            yield f"stages.{s.name}", list(s.shape)

    def _fresh_edit_problems(self) -> list[str]:
        """Fresh cases carry the edits of the profile's edge cases: each edit must fit in the profile's fresh
        ranges (rows and entries it names inside the input's shape at the top of the ranges)."""
        problems = []
        for profile in ("cpu", "gpu"):
            ranges = getattr(self.cases.fresh, profile) if self.cases.fresh is not None else {}
            if not ranges:
                continue
            dims = _strata.largest_dims(self.strata_scope(), profile)
            for case in self.cases_for(profile):
                if case.kind == "edge" and case.edits and not edits_fit(self, case.edits, dims):
                    problems.append(
                        f"cases.{profile}.{case.name}.edits: name rows or entries outside the inputs' "
                        f"shapes at the top of cases.fresh.{profile} {dims} (fresh cases carry them)"
                    )
        return problems

    def _roofline_problems(self, dims_used: set[str], dry_run: bool) -> list[str]:
        if self.roofline is None:
            return []
        names = _roofline.Names(
            dims=frozenset(dims_used),
            params=frozenset(self.numeric_params()),
            inputs=frozenset(i.name for i in self.inputs),
            tensors=frozenset(t.name for t in [*self.inputs, *self.outputs]),
        )
        problems = []
        for field in _roofline.FIELDS:
            expr = getattr(self.roofline, field)
            try:
                _roofline.check_expression(expr, names)
                if dry_run:
                    _roofline.dry_run(expr, self._roofline_trials())
            except ValueError as err:
                problems.append(f"roofline.{field}: {err}")
        return problems

    def _roofline_trials(self):
        """(label, scope) for every declared case and dtype variant, every input at the low end of its range,
        then at the high end. Edits are left out."""
        params = self.numeric_params()
        for profile in ("cpu", "gpu"):
            for case in self.cases_for(profile):
                ends = {i.name: _range_ends(i, case.dims) for i in self.inputs}
                for dtype in self.dtypes:
                    tensors = self.tensor_specs(case.dims, dtype)
                    for index, end in enumerate(("low", "high")):
                        values = _roofline.filled_inputs(tensors, {name: pair[index] for name, pair in ends.items()})
                        label = f"case {profile}.{case.name}, dtype {dtype}, every input at the {end} end of its range"
                        yield label, _roofline.Scope(dims=case.dims, params=params, tensors=tensors, values=values)

    def tensor_specs(self, dims: Mapping[str, int], dtype: str) -> dict[str, _roofline.TensorSpec]:
        """Every input and output of a case: shape from the dims, `$dtype` resolved to `dtype`, role."""
        specs: dict[str, _roofline.TensorSpec] = {}
        for t in [*self.inputs, *self.outputs]:
            role = t.role if isinstance(t, Input) else "out"
            resolved = dtype if t.dtype == DTYPE_VARIANT else t.dtype
            specs.setdefault(t.name, _roofline.TensorSpec(evaluate_shape(list(t.shape), dict(dims)), resolved, role))
        return specs

    def numeric_params(self) -> dict[str, int | float]:
        """The top-level params that are numbers (what roofline expressions may name)."""
        return {k: v for k, v in self.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def strata_scope(self) -> _strata.Scope:
        """What the strata of fresh cases are derived from: the boundaries, the fresh ranges, the randint inputs."""
        fresh = self.cases.fresh
        return _strata.Scope(
            boundaries=tuple(self.cases.boundaries),
            ranges={p: dict(getattr(fresh, p)) if fresh is not None else {} for p in ("cpu", "gpu")},
            randint={
                i.name: (i.distribution.low, i.distribution.high) for i in self.inputs if isinstance(i.distribution, RandInt)
            },
        )

    def strata(self, profile: ProfileName) -> list[_strata.Stratum]:
        """The strata every check's fresh cases of this profile cover (ferret/contract/strata.py)."""
        return _strata.derive_strata(self.strata_scope(), profile)

    # Convenience accessors used across the gate.
    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def golden_names(self) -> list[str]:
        """What the gate stores of the reference's answer: every stage, and the error scales and allowances stages
        declare."""
        companions = [name for s in self.stages for name in (s.error_scale, s.exact_within) if name]
        return [s.name for s in self.stages] + companions

    def tolerance(self, dtype: str, stage: str, case: str | None = None) -> Tolerance:
        """The stage's tolerance; a frozen case's own (tighter) row where the table has one."""
        if self.tolerances is None:
            raise ValueError(f"contract {self.op!r} has no tolerances yet: run `ferret calibrate` first")
        own = self.tolerances.by_case.get(case or "", {}).get(dtype, {}).get(stage)
        general = self.tolerances.by_dtype[dtype][stage]
        if own is None:
            return general
        # A case row derived before the table had row bounds still gets the general row bound (never looser).
        return own if own.max_row_rel is not None else own.model_copy(update={"max_row_rel": general.max_row_rel})

    def cases_for(self, profile: ProfileName) -> list[Case]:
        return list(getattr(self.cases, profile))

    @property
    def primary_dtype(self) -> str:
        return self.dtypes[0]


def edits_fit(contract: Contract, edits: list[Edit], dims: Mapping[str, int]) -> bool:
    """Whether every row and entry the edits name lies inside its input's shape at these dims."""
    specs = {i.name: i for i in contract.inputs}
    for edit in edits:
        shape = evaluate_shape(list(specs[edit.input].shape), dict(dims))
        rows = 1
        for size in shape[:-1]:
            rows *= size
        if any(not 0 <= r < rows for r in edit.rows):
            return False
        if any(len(i) != len(shape) or any(not 0 <= x < n for x, n in zip(i, shape, strict=True)) for i in edit.at):
            return False
        if edit.axis is not None and not -len(shape) <= edit.axis < len(shape):
            return False
    return True


def _scale_problems(inp: Input, scales: Input | None, cases: list[Case]) -> list[str]:
    """What is wrong with a float8 input's scales input: absent, not float32, not in place where the input is, or
    not of the input's shape with its last axis divided by the block (checked at every declared case's dims)."""
    assert inp.scales is not None
    where = f"inputs.{inp.name}.scales.input"
    if scales is None:
        return [f"{where}: no input named {inp.scales.input!r}"]
    problems = [f"{where}: {scales.name} must be float32, not {scales.dtype}"] if scales.dtype != "float32" else []
    if inp.role == "inout" and scales.role != "inout":
        problems.append(f"{where}: {scales.name} must be inout as {inp.name} is (the candidate writes both)")
    for case in cases:
        try:
            shape = evaluate_shape(list(inp.shape), case.dims)
            scale_shape = evaluate_shape(list(scales.shape), case.dims)
        except ValueError:
            continue  # an unknown dim is reported with the shape expressions
        block = inp.scales.block
        if not shape or shape[-1] % block or scale_shape != shape[:-1] + (shape[-1] // block,):
            problems.append(
                f"inputs.{inp.name}.scales.block: {block} values per scale need {scales.name} of shape "
                f"{list(shape[:-1]) + [shape[-1] // block if shape else 0]} (a last axis divisible by the block); "
                f"case {case.name} gives {list(scale_shape)} for {list(shape)}"
            )
            break
    return problems


def _range_ends(spec: Input, dims: dict[str, int]) -> tuple[float, float]:
    """The two ends of an input's distribution at these dims (0 and 1 for the unbounded normal ones)."""
    dist = spec.distribution
    if isinstance(dist, RandInt):
        return evaluate(dist.low, dims), evaluate(dist.high, dims)
    if isinstance(dist, Uniform):
        return dist.low, dist.high
    if isinstance(dist, Constant):
        return dist.value, dist.value
    return 0.0, 1.0
