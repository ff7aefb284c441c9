"""Cheats of the balanced-runs MLA kernel (split_chunk=balanced) are rejected by the gate's CPU cases.

A kernel that is faster because it computes less is a cheat. The template point the template search tried on the
H200 (balanced runs, the streamed merge, TMA descriptors; tasks/mla_attention/templates/space.yaml `starts`), with
16-row tiles so that the gate's CPU cases make runs that cross from one request into the next, is edited three ways
that each skip work: a run attends only to the first request it meets, every run drops its last tile, the merge reads
only each row's first split. The judge's numerical decision over every CPU case variant of the gate
(`tasks.variants.failing_stages`, the same comparison and tolerance table as `ferret check`) rejects each edit, and
passes the unedited point.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO  # noqa: E402
from mla_split_checks import balanced_runs  # noqa: E402

from ferret.contract.task import Task  # noqa: E402
from ferret.roles.offline import TemplateSearchOptimizer  # noqa: E402
from tasks.variants import failing_stages, frozen_cases, import_file  # noqa: E402

CONTRACT = REPO / "contracts" / "mla_attention.yaml"
POINT = {"split_chunk": "balanced", "side_kernels": "streamed", "kv_loads": "descriptors", "token_block": 16}

# Each cut: (what it skips, the exact line of the rendered point, its replacement).
CUTS = {
    "first_request_of_each_run": (
        "a run attends only to the first request it meets",
        "    for _ in range(b_first, b_end):",
        "    for _ in range(b_first, tl.minimum(b_end, b_first + 1)):",
    ),
    "last_tile_of_each_run": (
        "every run drops its last tile",
        "    last = tl.minimum(first + run, total)",
        "    last = tl.minimum(first + run, total) - 1",
    ),
    "first_split_of_each_row": (
        "the merge reads only each row's first split",
        '    filled_rows = tl.max(tl.where(lse != float("-inf"), split_offs[None, :] + 1, 0), axis=1)',
        '    filled_rows = tl.minimum(tl.max(tl.where(lse != float("-inf"), split_offs[None, :] + 1, 0), axis=1), 1)',
    ),
}


@pytest.fixture(scope="module")
def gate_cases():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    task = Task.load(CONTRACT)
    return task.contract, frozen_cases(task, "cpu")


@pytest.fixture(scope="module")
def source() -> str:
    optimizer = TemplateSearchOptimizer(REPO / "tasks" / "mla_attention" / "templates")
    return optimizer.render(optimizer.space.canonical({**optimizer.space.default, **POINT}))


def _load(source: str, path: Path):
    path.write_text(source)  # Triton's JIT reads kernel source from a real file
    return import_file(path, f"mla_balanced_{path.stem}")


def test_some_gate_case_has_runs_that_cross_requests(gate_cases, source, tmp_path):
    """The cuts of the runs only show where a run meets more than one request: some CPU case of the gate has such a
    run at this point's sizing (the interpreter's 8 programs, runs of at least one tile)."""
    import torch

    module = _load(source, tmp_path / "sizing.py")
    crossing = []
    for judged in gate_cases[1]:
        batch, heads = judged.inputs["q_nope"].shape[:2]
        config = module._attention_config(batch, heads, judged.inputs["kv_cache"].shape[1], torch.device("cpu"))
        tiles = [math.ceil((int(n) + 1) / config["BLOCK_N"]) for n in judged.inputs["cache_lens"]]
        filled = balanced_runs(tiles, config["programs"], config["min_tiles"])
        run = max(math.ceil(sum(tiles) / config["programs"]), config["min_tiles"])
        first_programs = {b: sum(tiles[:b]) // run for b in range(batch)}
        programs_of = {first_programs[b] + s for b, s in filled}
        if len(programs_of) < len(filled):  # two requests' splits in one program: a run crossed
            crossing.append(judged.id)
    assert crossing


def test_the_point_passes_every_gate_case(gate_cases, source, tmp_path):
    contract, cases = gate_cases
    assert failing_stages(_load(source, tmp_path / "honest.py").run, contract, cases) == []


@pytest.mark.parametrize("name", sorted(CUTS))
def test_each_cut_is_rejected_by_the_gate_cases(gate_cases, source, tmp_path, name):
    what, line, replacement = CUTS[name]
    assert source.count(line + "\n") == 1, f"{name}: the line to cut is not in the rendered point once"
    cut = source.replace(line + "\n", replacement + "\n")
    contract, cases = gate_cases
    failing = failing_stages(_load(cut, tmp_path / f"{name}.py").run, contract, cases)
    assert failing, f"{name} ({what}) passed every gate case"
