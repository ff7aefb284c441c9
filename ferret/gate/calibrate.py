"""Tolerances by a method, not by hand.

For every dtype and stage: the largest error of the honest implementations (the baseline and the
honest candidates named, all in the contract's dtypes; several of them, because summation order alone
moves the error) against the float64 reference over many seeds, times a stated margin, floored at a few
units of the dtype's rounding. Then the false-rejection rate: the honest candidates are run on fresh
seeds, never used for the table, and the share of rejected case runs is recorded beside it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.load import ContractError, load_contract, tolerance_file
from ferret.contract.model import Contract, ProfileName, Tolerance, ToleranceTable
from ferret.errors import UsageError
from ferret.gate.inputs import case_variants, draw_inputs, output_specs, variant_id
from ferret.gate.metrics import compare_to_golden
from ferret.sandbox.interpreter import prepare_interpreter

CALIBRATION_SEED_BASE = 1_000_000
CHECK_SEED_BASE = 2_000_000
# The floor only keeps a tolerance from being zero where the honest implementations happened to be
# exact on the calibration seeds: a few float32 rounding units, whatever the dtype. It is not derived
# from the input dtype, so that a stage the contract computes in float32 (a norm's statistics, say)
# cannot be computed in bf16 inside a bf16 case's tolerance.
FLOAT32_UNIT_ROUNDOFF = 2.0**-24
FLOOR_UNITS = 8.0
_PERMISSIVE = Tolerance(rel_l2=float("inf"))


def _run_implementation(run, inputs, contract: Contract, case, dtype: str, device: str):
    inputs = {k: v.to(device).clone() for k, v in inputs.items()}
    outputs = {
        n: torch.full(s, float("nan"), dtype=d, device=device) for n, (s, d) in output_specs(contract, case, dtype).items()
    }
    trace: dict = {}
    run(inputs, outputs, dict(contract.params), trace=trace)
    values = dict(trace)
    values.update(outputs)
    for spec in contract.inputs:
        if spec.role == "inout":
            values[spec.name] = inputs[spec.name]
    return {k: v.detach().cpu() for k, v in values.items() if isinstance(v, torch.Tensor)}


def _interpret_on_cpu(device: str) -> None:
    """Triton under its interpreter where the CPU profile has no GPU, prepared as the candidates' processes get it (the
    honest implementations run in this process; ferret/sandbox/interpreter.py)."""
    if device == "cpu" and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") == "1":
        prepare_interpreter()


def _load_candidate(path: Path, entry: str):
    spec = importlib.util.spec_from_file_location(f"ferret_calibration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not a Python source file, cannot be loaded as a candidate")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, entry)


def _tolerance_from(worst: dict[str, float], margin: float, floor: float, rows: bool = False) -> Tolerance:
    """`rows`: the stage has rows (two or more axes), whose largest error is bounded too."""
    rel_l2 = float(f"{max(worst['rel_l2'] * margin, floor):.3g}")
    max_abs_rel_peak = float(f"{max(worst['max_abs_rel_peak'] * margin, floor):.3g}")
    cosine_distance = float(f"{max(worst['one_minus_cosine'] * margin, floor * floor):.3g}")
    # A relative L2 error eps allows a cosine as low as sqrt(1 - eps^2); a tighter cosine bound would
    # reject, on small or sparse stages (a few unmasked scores), errors the L2 bound accepts.
    cosine_min = min(1.0 - cosine_distance, (1.0 - rel_l2 * rel_l2) ** 0.5)
    max_row_rel = row_bound(worst.get("max_row_rel", 0.0), margin, floor) if rows else None
    return Tolerance(rel_l2=rel_l2, max_abs_rel_peak=max_abs_rel_peak, cosine_min=cosine_min, max_row_rel=max_row_rel)


def row_bound(worst_row: float, margin: float, floor: float = FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF) -> float:
    """The per-row bound: the largest honest row error times the margin, floored at a few float32 units (a row the
    honest kernels happened to get exact still has a bound above zero)."""
    return float(f"{max(worst_row * margin, floor):.3g}")


def calibrate(
    contract_path: str | Path,
    seeds: int = 16,
    margin: float = 4.0,
    check_seeds: int = 8,
    candidates: Sequence[Path] = (),
    profile: ProfileName = "cpu",
    progress: Callable[[str], None] = lambda m: None,
    force: bool = False,
) -> Path:
    """Measure the honest error, derive the tolerance table and the honest candidates' false-rejection
    rates, write the table to the file the contract names (`<op>.tolerances.yaml` beside it by default) and
    return that file.

    Where that file exists, the new table is compared with it bound by bound (`tolerance_changes`), each
    change said through `progress`; a table that loosens any bound is refused (`LooserTolerances`, a
    UsageError listing every change, nothing written) unless `force`."""
    contract_path = Path(contract_path)
    contract = load_contract(contract_path, require_tolerances=False)
    out = tolerance_file(contract_path) or contract_path.parent / f"{contract.op}.tolerances.yaml"
    device = "cuda" if profile == "gpu" else "cpu"
    _interpret_on_cpu(device)
    root = project_root_of(contract_path)
    reference = load_entry(contract.reference.entry, root)
    baseline = load_entry(contract.baseline.entry, root)
    variants = case_variants(contract, profile)
    honest = {contract.baseline.entry: baseline}
    for path in candidates:
        honest[Path(path).name] = _load_candidate(Path(path), contract.candidate_abi.entry)
    setup = _Calibration(contract, reference, device, variants)

    worst, exposed = _measure_worst_errors(setup, honest, seeds, progress)
    never = [st.name for st in contract.stages if st.name not in exposed]
    if never:
        raise ContractError(
            f"{contract_path}: stages {never} are exposed by no honest implementation: nothing to calibrate them on"
        )
    date = _dt.date.today().isoformat()
    table = _tolerance_table(setup, worst, margin, list(honest), seeds, profile, date)
    contract_with_table = contract.model_copy(update={"tolerances": table})

    false_rejection: dict[str, dict] = {}
    for path in candidates:
        name = Path(path).name
        false_rejection[name] = _false_rejection(setup, honest[name], contract_with_table, check_seeds)
        progress(f"{name}: {false_rejection[name]['rejected']}/{false_rejection[name]['runs']} honest case runs rejected")

    table = table.model_copy(update={"false_rejection": false_rejection})
    table = _checked_against_existing(out, table, force, progress)
    return _write_table(out, contract_path, table, worst, seeds, margin, date, force)


def add_row_bounds(
    contract_path: str | Path,
    seeds: int = 16,
    margin: float = 4.0,
    candidates: Sequence[Path] = (),
    profile: ProfileName = "cpu",
    progress: Callable[[str], None] = lambda m: None,
) -> Path:
    """Add `max_row_rel` to every multi-axis stage of the table in force, by calibrate's method (the largest row
    error of the honest implementations over `seeds` seeds of every case variant, times `margin`, floored at a few
    float32 units), and leave every other number of it as it is. A row bound already there is kept where tighter."""
    contract_path = Path(contract_path)
    contract = load_contract(contract_path)
    out = tolerance_file(contract_path) or contract_path.parent / f"{contract.op}.tolerances.yaml"
    device = "cuda" if profile == "gpu" else "cpu"
    _interpret_on_cpu(device)
    root = project_root_of(contract_path)
    honest = {contract.baseline.entry: load_entry(contract.baseline.entry, root)}
    for path in candidates:
        honest[Path(path).name] = _load_candidate(Path(path), contract.candidate_abi.entry)
    setup = _Calibration(contract, load_entry(contract.reference.entry, root), device, case_variants(contract, profile))
    worst, _exposed = _measure_worst_errors(setup, honest, seeds, progress)
    data = yaml.safe_load(out.read_text())
    observed = data.setdefault("observed", {})
    for dtype, stages in worst.items():
        for stage, w in stages.items():
            row = data["by_dtype"].get(dtype, {}).get(stage)
            if "max_row_rel" not in w or row is None:
                continue
            new = row_bound(w["max_row_rel"], margin)
            row["max_row_rel"] = min(new, row.get("max_row_rel", new))
            observed.setdefault(dtype, {}).setdefault(stage, {})["max_row_rel"] = w["max_row_rel"]
    date = _dt.date.today().isoformat()
    data["provenance"] += (
        f". max_row_rel (added {date}, every other number as it was): the largest error of any one row (the vector "
        f"along a stage's last axis) of the honest implementations ({', '.join(honest)}) over {seeds} seeds x "
        f"{len(setup.variants)} '{profile}' case variants, x margin {margin}, floored at {FLOOR_UNITS:g} float32 "
        "rounding units"
    )
    ToleranceTable.model_validate(data)  # what is written is a table the judge loads
    out.write_text(_leading_comments(out) + yaml.safe_dump(data, sort_keys=False, width=120))
    return out


def _leading_comments(path: Path) -> str:
    """The comment lines a table file opens with (how it was generated), kept when a field is added to it."""
    lines = path.read_text().splitlines(keepends=True)
    return "".join(line for line in lines[: next((i for i, x in enumerate(lines) if not x.startswith("#")), 0)])


@dataclass(frozen=True)
class _Calibration:
    """What every measurement of one calibration shares: the contract as loaded, its float64 reference,
    the device both run on, and the profile's case variants."""

    contract: Contract
    reference: Callable
    device: str
    variants: list

    def golden(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.reference({k: v.to(self.device) for k, v in inputs.items()}, dict(self.contract.params))


def _measure_worst_errors(
    setup: _Calibration, honest: dict, seeds: int, progress: Callable[[str], None]
) -> tuple[dict[str, dict[str, dict[str, float]]], set[str]]:
    """(the largest error of any honest implementation, by dtype, stage and metric, over the calibration
    seeds; the stages some implementation exposes)."""
    contract = setup.contract
    worst = {
        d: {
            s.name: {"rel_l2": 0.0, "max_abs_rel_peak": 0.0, "one_minus_cosine": 0.0}
            | ({"max_row_rel": 0.0} if len(s.shape) > 1 else {})
            for s in contract.stages
        }
        for d in contract.dtypes
    }
    exposed: set[str] = set()
    for number, (case, dtype, _part) in enumerate(setup.variants, 1):
        for s in range(seeds):
            seed = CALIBRATION_SEED_BASE + case.seed * 1000 + s
            inputs = draw_inputs(contract, case, dtype, seed=seed)
            golden = setup.golden(inputs)
            for name, implementation in honest.items():
                got = _run_implementation(implementation, inputs, contract, case, dtype, setup.device)
                nonfinite_error = f"{name} disagrees with the reference on NaN/Inf at {variant_id(case, dtype)} seed {seed}"
                exposed |= _update_worst_errors(worst[dtype], got, golden, contract, nonfinite_error)
        progress(f"[{number}/{len(setup.variants)}] {variant_id(case, dtype)}: {seeds} seeds measured")
    return worst, exposed


def _update_worst_errors(
    worst: dict[str, dict[str, float]], got: dict, golden: dict, contract: Contract, nonfinite_error: str
) -> set[str]:
    """Raise each stage's worst error so far to this run's where it is larger; return the stages the run
    exposed. A NaN or Inf where the reference has none (or the reverse) is no rounding error: no tolerance
    may absorb it, so it stops the calibration."""
    exposed = set()
    for stage in contract.stages:
        if stage.candidate_stage not in got:
            continue
        m = compare_to_golden(got[stage.candidate_stage], golden, stage, _PERMISSIVE)
        if m.nonfinite_mismatches:
            raise ContractError(f"{nonfinite_error} stage {stage.name}")
        exposed.add(stage.name)
        w = worst[stage.name]
        w["rel_l2"] = max(w["rel_l2"], m.rel_l2 or 0.0)
        w["max_abs_rel_peak"] = max(w["max_abs_rel_peak"], m.max_abs_rel_peak or 0.0)
        w["one_minus_cosine"] = max(w["one_minus_cosine"], 1.0 - (m.cosine if m.cosine is not None else 1.0))
        if "max_row_rel" in w:
            w["max_row_rel"] = max(w["max_row_rel"], m.max_row_rel or 0.0)
    return exposed


def _with_scale_floor(tolerance: Tolerance, contract: Contract, dtype: str, stage: str) -> Tolerance:
    """A stage's scale and peak floors are properties of its math, not of the honest error: kept from the table
    the contract has, so re-running calibrate never drops them."""
    table = contract.tolerances
    kept = table.by_dtype.get(dtype, {}).get(stage) if isinstance(table, ToleranceTable) else None
    if kept is None:
        return tolerance
    return tolerance.model_copy(update={"scale_floor": kept.scale_floor, "peak_floor": kept.peak_floor})


def _tolerance_table(
    setup: _Calibration, worst: dict, margin: float, honest: list[str], seeds: int, profile: str, date: str
) -> ToleranceTable:
    """The table: each worst error times the margin, floored, with the provenance that says so."""
    contract = setup.contract
    by_dtype: dict[str, dict[str, Tolerance]] = {}
    for dtype, stages in worst.items():
        floor = FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF
        by_dtype[dtype] = {
            name: _with_scale_floor(_tolerance_from(w, margin, floor, "max_row_rel" in w), contract, dtype, name)
            for name, w in stages.items()
        }
    return ToleranceTable(
        provenance=(
            f"ferret calibrate, {date}: largest error of the honest implementations ({', '.join(honest)}) against the "
            f"{contract.reference.precision} reference over {seeds} seeds x {len(setup.variants)} '{profile}' case variants, "
            f"x margin {margin} (cosine: no tighter than the L2 bound implies), floored at {FLOOR_UNITS:g} float32 rounding "
            "units (cosine distance: the floor squared)"
        ),
        by_dtype=by_dtype,
    )


def _false_rejection(setup: _Calibration, implementation, judged: Contract, check_seeds: int) -> dict:
    """How often the table rejects one honest candidate on fresh seeds (never used for the table): its case
    runs, the rejected ones, their rate and the first failures."""
    runs = rejected = 0
    failures: list[str] = []
    for case, dtype, _part in setup.variants:
        for s in range(check_seeds):
            seed = CHECK_SEED_BASE + case.seed * 1000 + s
            inputs = draw_inputs(setup.contract, case, dtype, seed=seed)
            golden = setup.golden(inputs)
            got = _run_implementation(implementation, inputs, setup.contract, case, dtype, setup.device)
            runs += 1
            bad = [
                st.name
                for st in setup.contract.stages
                if st.candidate_stage in got
                and not compare_to_golden(got[st.candidate_stage], golden, st, judged.tolerance(dtype, st.name)).passed
            ]
            if bad:
                rejected += 1
                failures.append(f"{variant_id(case, dtype)} seed {seed}: {bad}")
    return {
        "runs": runs,
        "rejected": rejected,
        "rate": rejected / runs if runs else 0.0,
        "seeds_per_case": check_seeds,
        "failures": failures[:20],
    }


def _write_table(
    out: Path,
    contract_path: Path,
    table: ToleranceTable,
    worst: dict,
    seeds: int,
    margin: float,
    date: str,
    force: bool,
) -> Path:
    """Write the table to `out`, with the observed honest errors, and return `out`."""
    forced = " --force" if force else ""
    header = (
        f"# Generated by `ferret calibrate {contract_path.name} --seeds {seeds} --margin {margin}{forced}` on {date}.\n"
        "# Do not edit by hand: re-run calibrate. The observed honest errors are in `observed`.\n"
    )
    data = table.model_dump(mode="json", exclude_none=True)
    data["observed"] = worst
    out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
    return out


class LooserTolerances(UsageError):
    """`ferret calibrate` would loosen a bound of an existing tolerance table: nothing was written."""

    def __init__(self, path: Path, changes: list[ToleranceChange]):
        self.path, self.changes = path, changes
        looser = [c for c in changes if c.looser]
        lines = "\n".join(f"  {c.line()}" for c in changes)
        super().__init__(
            f"{path}: the new table loosens {len(looser)} bound(s) of the one in force; nothing written. "
            f"Changes (old -> new):\n{lines}\nRe-run with --force to write it all the same."
        )


# How each bound of a Tolerance admits more: a larger error bound, a smaller cosine, a larger scale or peak floor
# (the stage's scale divides the error). A bound that goes away admits everything.
_LARGER_IS_LOOSER = {
    "rel_l2": True,
    "max_abs_rel_peak": True,
    "cosine_min": False,
    "max_row_rel": True,
    "scale_floor": True,
    "peak_floor": True,
}
_FLOORS = ("scale_floor", "peak_floor")


@dataclass(frozen=True)
class ToleranceChange:
    """One bound of a tolerance table that differs between the table in force (`old`) and a new one."""

    entry: str  # by_dtype.<dtype>.<stage>.<bound> or by_case.<case>.<dtype>.<stage>.<bound>
    old: float | None
    new: float | None

    @property
    def looser(self) -> bool:
        """Whether the new value admits an error the old one rejects."""
        bound = self.entry.rsplit(".", 1)[1]
        if self.new is None or self.old is None:  # a floor appearing loosens; any other bound disappearing does
            return (self.old is None) == (bound in _FLOORS)
        return (self.new > self.old) == _LARGER_IS_LOOSER[bound] and self.new != self.old

    def line(self) -> str:
        kind = "looser" if self.looser else "tighter"
        return f"{self.entry}: {_shown(self.old)} -> {_shown(self.new)} ({kind})"


def _shown(value: float | None) -> str:
    """The value as the table file holds it (the shortest repr: a cosine bound differs in its 7th digit)."""
    return "none" if value is None else repr(float(value))


def tolerance_changes(old: ToleranceTable, new: ToleranceTable) -> list[ToleranceChange]:
    """Every bound that differs between the table in force and a new one, as the judge applies them: each
    dtype and stage's row, and each frozen case's own row where either table has one (a case row the new
    table drops is compared with the new general row, which the case then gets)."""
    changes: list[ToleranceChange] = []
    for dtype in sorted(set(old.by_dtype) | set(new.by_dtype)):
        for stage in sorted(set(old.by_dtype.get(dtype, {})) | set(new.by_dtype.get(dtype, {}))):
            changes += _bound_changes(
                f"by_dtype.{dtype}.{stage}", old.by_dtype.get(dtype, {}).get(stage), new.by_dtype.get(dtype, {}).get(stage)
            )
    for case in sorted(set(old.by_case) | set(new.by_case)):
        rows = {(d, st) for t in (old, new) for d, stages in t.by_case.get(case, {}).items() for st in stages}
        for dtype, stage in sorted(rows):
            changes += _bound_changes(
                f"by_case.{case}.{dtype}.{stage}", _row(old, case, dtype, stage), _row(new, case, dtype, stage)
            )
    return changes


def _row(table: ToleranceTable, case: str, dtype: str, stage: str) -> Tolerance | None:
    """The tolerance the judge applies to `case`: its own row, else the general one."""
    own = table.by_case.get(case, {}).get(dtype, {}).get(stage)
    return own if own is not None else table.by_dtype.get(dtype, {}).get(stage)


def _bound_changes(entry: str, old: Tolerance | None, new: Tolerance | None) -> list[ToleranceChange]:
    found = []
    for bound in _LARGER_IS_LOOSER:
        before = getattr(old, bound) if old is not None else None
        after = getattr(new, bound) if new is not None else None
        if before != after and not (old is None and after is None):
            found.append(ToleranceChange(f"{entry}.{bound}", before, after))
    return found


def _checked_against_existing(out: Path, table: ToleranceTable, force: bool, progress: Callable[[str], None]) -> ToleranceTable:
    """The table to write over `out`: with the old table's frozen-case rows that are still no looser than the
    new general rows. Each change is said; a looser bound is a `LooserTolerances` unless `force`."""
    if not out.exists():
        progress(f"{out}: a new tolerance table")
        return table
    try:
        old = ToleranceTable.model_validate(yaml.safe_load(out.read_text()))
    except (yaml.YAMLError, ValueError) as err:
        if not force:
            raise UsageError(
                f"{out} exists and is no tolerance table ({str(err).splitlines()[0]}); nothing written. "
                "Re-run with --force to replace it."
            ) from None
        progress(f"{out}: not a tolerance table; replaced (--force)")
        return table
    table = table.model_copy(update={"by_case": _still_tighter_case_rows(old, table)})
    changes = tolerance_changes(old, table)
    if any(c.looser for c in changes) and not force:
        raise LooserTolerances(out, changes)
    tighter = sum(not c.looser for c in changes)
    progress(
        f"{out}: {len(changes) - tighter} bound(s) looser{' (--force)' if force else ''}, {tighter} tighter, "
        "every other bound unchanged"
    )
    for change in changes:
        progress(f"  {change.line()}")
    return table


def _still_tighter_case_rows(old: ToleranceTable, new: ToleranceTable) -> dict:
    """The old table's frozen-case rows (derived apart from calibrate), each bound no looser than the new
    general row's, with its scale floor (a case row may only tighten the general row)."""
    kept: dict = {}
    for case, dtypes in old.by_case.items():
        for dtype, stages in dtypes.items():
            for stage, row in stages.items():
                general = new.by_dtype.get(dtype, {}).get(stage)
                if general is not None:
                    kept.setdefault(case, {}).setdefault(dtype, {})[stage] = _tighter_of(row, general)
    return kept


def _tighter_of(row: Tolerance, general: Tolerance) -> Tolerance:
    """Each bound of `row` or `general`, whichever admits less (a missing error bound admits everything, a
    missing peak floor nothing); the scale floor is the general row's."""

    def least(a: float | None, b: float | None) -> float | None:
        return b if a is None else a if b is None else min(a, b)

    cosines = [c for c in (row.cosine_min, general.cosine_min) if c is not None]
    peak_floor = None if row.peak_floor is None or general.peak_floor is None else min(row.peak_floor, general.peak_floor)
    return Tolerance(
        rel_l2=least(row.rel_l2, general.rel_l2),
        max_abs_rel_peak=least(row.max_abs_rel_peak, general.max_abs_rel_peak),
        cosine_min=max(cosines) if cosines else None,
        max_row_rel=least(row.max_row_rel, general.max_row_rel),
        scale_floor=general.scale_floor,
        peak_floor=peak_floor,
    )
