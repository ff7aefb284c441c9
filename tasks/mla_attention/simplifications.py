"""The four plausible simplifications of MLA a faithful gate must catch, as one-line edits of the Triton
candidate's source, each with the first stage at which it must diverge from the reference.

    path = write_variant("theta", tmp_dir / "mla_theta.py")   # a candidate file for the judge
    module = load_variant("theta", tmp_dir)                   # or imported, same run(...) ABI
"""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_mla.py"

class Simplification(NamedTuple):
    old_line: str  # exactly one line of candidates/triton_mla.py
    new_line: str
    expected_first_stage: str  # the first stage (reference order) that must diverge


SIMPLIFICATIONS: dict[str, Simplification] = {
    # rope with plain theta-10000 frequencies instead of YaRN's
    "theta": Simplification(
        "_USE_YARN = True  # SWITCH rope: False gives plain theta^(-2i/d) frequencies instead of YaRN's",
        "_USE_YARN = False  # SIMPLIFIED: plain theta-10000 rope",
        "q_pe_roped",
    ),
    # softmax scale 1/sqrt(576), the width of the absorbed dot product, instead of mscale^2/sqrt(192)
    "scale": Simplification(
        '_SCALE_MODE = "mscale"  # SWITCH scale: "latent_width" gives 1/sqrt(576) instead of mscale^2/sqrt(192)',
        '_SCALE_MODE = "latent_width"  # SIMPLIFIED: softmax scale 1/sqrt(576)',
        "scores",
    ),
    # c_kv = c_kv_raw: kv_a_layernorm skipped
    "no_kv_norm": Simplification(
        "_APPLY_KV_NORM = True  # SWITCH kv norm: False writes c_kv_raw to the cache without kv_a_layernorm",
        "_APPLY_KV_NORM = False  # SIMPLIFIED: c_kv = c_kv_raw",
        "c_kv",
    ),
    # head-sum: one W_UV (the mean over heads) instead of each head's own
    "head_sum": Simplification(
        "_PER_HEAD_UV = True  # SWITCH un-absorption: False uses one W_UV shared by all heads (their mean)",
        "_PER_HEAD_UV = False  # SIMPLIFIED: head-sum, one W_UV for every head",
        "o_heads",
    ),
}


def replace_lines(source: str, edits: list[tuple[str, str]], name: str) -> str:
    """`source` with each old line of `edits` replaced by its new line (its line ending kept); fails unless
    every old line occurs exactly once and the source changes. Shared by the precision variants."""
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
    simplifications and the precision variants (`edits_of(name)` gives a variant's (old, new) lines)."""

    def __init__(self, edits_of: Callable[[str], list[tuple[str, str]]], module_prefix: str,
                 candidate: Path = CANDIDATE_PATH) -> None:
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


_FILES = VariantFiles(lambda name: [SIMPLIFICATIONS[name][:2]], "_mla_simplified")
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load
