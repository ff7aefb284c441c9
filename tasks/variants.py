"""What every op's candidate variants share (tasks/<op>/precision_variants.py, the MLA simplifications): a
variant is a set of exact line edits of the op's honest candidate, written as a candidate file or imported;
and the judge's numerical decision over a gate's frozen cases, run in this process (the tests and the
evidence script benchmarks/mla_tolerance_checks.py)."""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple


class Variant(NamedTuple):
    edits: tuple[tuple[str, str], ...]  # (old line, new line): exact lines of the op's candidate
    kind: Literal["faithful", "precision", "skip"]
    what: str


def replace_lines(source: str, edits: list[tuple[str, str]], name: str) -> str:
    """`source` with each old line of `edits` replaced by its new line (its line ending kept); fails unless
    every old line occurs exactly once and the source changes."""
    lines = source.splitlines(keepends=True)
    for old_line, new_line in edits:
        hits = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == old_line]
        if len(hits) != 1:
            raise ValueError(f"{name}: expected the line {old_line!r} exactly once, found it {len(hits)} times")
        lines[hits[0]] = new_line + lines[hits[0]][len(old_line):]
    result = "".join(lines)
    if result == source:
        raise ValueError(f"{name}: the edits left the source unchanged")
    return result


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import the candidate file at `path` as `module_name` (Triton's JIT reads the source from a real file)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclass/inspect lookups expect the module to be registered
    spec.loader.exec_module(module)
    return module


class VariantFiles:
    """Source, file and module of named line-edit variants of the candidate: one implementation shared by the
    simplifications and every op's precision variants (`edits_of(name)` gives a variant's (old, new) lines)."""

    def __init__(self, edits_of: Callable[[str], list[tuple[str, str]]], module_prefix: str,
                 candidate: Path) -> None:
        self._edits_of = edits_of
        self._prefix = module_prefix
        self.candidate = candidate

    def source(self, name: str, source: str | None = None) -> str:
        """The candidate's source with `name`'s lines replaced; fails unless every old line occurs exactly once."""
        return replace_lines(self.candidate.read_text() if source is None else source, self._edits_of(name), name)

    def write(self, name: str, path: str | Path, source: str | None = None) -> Path:
        """Write the variant's source to `path` (a self-contained candidate file) and return the path."""
        path = Path(path)
        path.write_text(self.source(name, source))
        return path

    def load(self, name: str, directory: str | Path, source: str | None = None) -> ModuleType:
        """Write the variant into `directory` and import it (Triton's JIT reads the source from a real file)."""
        path = self.write(name, Path(directory) / f"{self.candidate.stem}_{name}.py", source)
        return import_file(path, f"{self._prefix}_{name}_{abs(hash(str(path)))}")


class JudgedCase(NamedTuple):
    id: str  # the variant id, as the verdict names it
    case: Any  # ferret.contract.model.Case
    dtype: str
    inputs: dict
    golden: dict  # the float64 reference's stages


def frozen_cases(task: Any, profile: str = "cpu") -> list[JudgedCase]:
    """Every frozen case variant of the gate on `profile`: inputs from the gate's seeds, golden stages from the
    reference, as the gate builds them."""
    from ferret.gate.inputs import case_variants, draw_inputs, variant_id

    found = []
    for case, dtype, _part in case_variants(task.contract, profile):  # type: ignore[arg-type]
        inputs = draw_inputs(task.contract, case, dtype)
        golden = task.reference({k: v.clone() for k, v in inputs.items()}, dict(task.contract.params))
        found.append(JudgedCase(variant_id(case, dtype), case, dtype, inputs, golden))
    return found


def failing_stages(run: Any, contract: Any, cases: list[JudgedCase]) -> list[str]:
    """The judge's numerical decision over `cases`, in this process: every stage of `run`'s answer compared by
    `compare_stage` with the tolerance the judge uses for that case (its own row where the table has one).
    One line per failing stage: `variant stage metric values (limits)`. Shared by the tests and the evidence
    script (benchmarks/mla_tolerance_checks.py)."""
    from ferret.gate.calibrate import _run_implementation
    from ferret.gate.metrics import compare_to_golden

    failing = []
    for judged in cases:
        got = _run_implementation(run, judged.inputs, contract, judged.case, judged.dtype, "cpu")
        for stage in contract.stages:
            tol = contract.tolerance(judged.dtype, stage.name, judged.case.name)
            m = compare_to_golden(got.get(stage.candidate_stage), judged.golden, stage, tol)
            if not m.passed:
                failing.append(f"{judged.id} {stage.name} rel_l2={m.rel_l2 or 0:.4g} (limit {tol.rel_l2}) "
                               f"max_abs_rel_peak={m.max_abs_rel_peak or 0:.4g} (limit {tol.max_abs_rel_peak})")
    return failing
