"""Presets: named sets of scan rules.

`triton` and `cuda` are what the judge uses (each language's backend names its preset: `Backend.scan_preset`):
every rule, for a candidate that is plain Python around @triton.jit kernels or around CUDA C++ sources (a rule
that does not apply to a language finds nothing in it). `minimal` keeps only the rules against tampering with
the judge itself (its files, its timer, its output channel, the modules it imports), which hold whatever a
candidate's kernels are written in; nothing in Ferret uses it yet.
"""

from __future__ import annotations

import ferret.integrity.rules  # noqa: F401  (registers every rule)
from ferret.integrity.registry import RULES, Rule

_TAMPERING = {"reference_import", "reading_expected", "shadowing", "harness_patching", "gate_tampering", "result_forging"}

PRESETS: dict[str, tuple[str, ...]] = {
    "triton": tuple(RULES),
    "cuda": tuple(RULES),
    "minimal": tuple(name for name, r in RULES.items() if r.cheat in _TAMPERING),
}


def rules_for(preset: str) -> list[Rule]:
    """The rules of a preset, in rank order. An unknown preset is a ValueError that names it."""
    if preset not in PRESETS:
        raise ValueError(f"unknown scan preset {preset!r}; the presets are {', '.join(sorted(PRESETS))}")
    return sorted((RULES[name] for name in PRESETS[preset]), key=lambda r: r.rank)
