"""Boundary-only bugs and cuts where no amplifying case looks.

Two ways for a kernel to be wrong only where the gate does not look:
- at a tile or block boundary that a fresh draw meets by luck only (one column short of a full tile, one column
  alone past a block): every check's fresh cases now hold a value one below and one above a multiple of each
  declared block (`either_side`) and the first value past each declared boundary (`<name>:first`), drawn
  deterministically per check (ferret/contract/strata.py);
- a precision cut switched off where the amplifying cases look, keyed on a property they share and ordinary
  batches lack (every request full, every length equal): each of MLA's amplifying cases has a twin at mixed
  lengths (contracts/mla_attention.yaml, `*_ragged`), where such a cut is on and amplified.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO, unnamed_rejection  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.strata import Boundary  # noqa: E402
from ferret.gate.fresh import plan_fresh_cases  # noqa: E402
from ferret.gate.inputs import draw_inputs  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from tasks.mla_attention.precision_variants import CUTS  # noqa: E402

HERE = Path(__file__).resolve().parent
SOFTMAX = CONTRACTS / "softmax.yaml"
HONEST_SOFTMAX = REPO / "tasks" / "softmax" / "candidates" / "triton_softmax.py"
BOUNDARY_CHEATS = ["u4_softmax_tail_one_short.py", "u4_softmax_lone_column.py"]
# Each amplifying case (built to expose a precision cut) and its twin at mixed lengths.
AMPLIFYING = {
    "cpu": {"long_rows_peaked": "long_rows_peaked_ragged", "cancelling_halves": "cancelling_halves_ragged"},
    "gpu": {"cancelling_halves_tp1": "cancelling_halves_ragged_tp1"},
}


# --- every check draws every stratum, deterministically --------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "rmsnorm"])
def test_every_check_holds_a_width_either_side_of_a_tile_and_one_past_each_block(op):
    """Whatever the check's random draws: a width one short of a multiple of 128 (and so of 16, 32, 64), a multiple,
    one past a multiple, and exactly the first width past each declared block (1025, 16385)."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for seed in range(20):  # each seed stands for one check's OS-random draws
        widths = {case.dims["N"] for case, _ in plan_fresh_cases(contract, "cpu", random.Random(seed))}
        residues = {n % 128 for n in widths}
        assert {0, 1, 127} <= residues, (seed, sorted(widths))
        assert {1025, 16385} <= widths, (seed, sorted(widths))


def test_every_check_holds_a_new_token_alone_in_a_new_block():
    """MLA: a request whose new token opens a 32-token block alone (attended length 32k + 1), one that fills a block
    to one short, and one exactly full, in every check's fresh cases."""
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    for seed in range(6):
        attended = set()
        for n, (case, _) in enumerate(plan_fresh_cases(contract, "cpu", random.Random(seed))):
            lens = draw_inputs(contract, case.model_copy(update={"seed": seed * 100 + n}), "bfloat16")["cache_lens"]
            attended |= {int(v) + 1 for v in lens.reshape(-1).tolist()}
        residues = {a % 32 for a in attended if a >= 31}
        assert {0, 1, 31} <= residues, (seed, sorted(attended))


def test_either_side_makes_two_strata_one_below_and_one_above_a_multiple():
    boundary = Boundary(name="tile", dim="N", multiple_of=128, either_side=True)
    with pytest.raises(ValueError, match="need multiple_of"):
        Boundary(name="tile", dim="N", at=17, either_side=True)
    contract = load_contract(SOFTMAX)
    scope = contract.strata_scope()
    names = [s.name for s in contract.strata("cpu")]
    assert {"column_block:multiple", "column_block:multiple-1", "column_block:multiple+1"} <= set(names)
    assert {"wide_row:first", "one_block_row:first"} <= set(names)
    assert boundary.either_side and scope.boundaries


# --- boundary-only bugs: rejected by every check, named -----------------------------------------------


@pytest.fixture(scope="module")
def softmax_verdicts(tmp_path_factory):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    gates = tmp_path_factory.mktemp("amplifying-gates")
    paths = {name: HERE / "candidates" / name for name in BOUNDARY_CHEATS}
    paths["honest"] = HONEST_SOFTMAX
    return {name: check(SOFTMAX, path, gates, profile="cpu")[0] for name, path in paths.items()}


@pytest.mark.parametrize("name", BOUNDARY_CHEATS)
def test_a_kernel_wrong_only_at_a_tile_boundary_is_rejected_on_its_stratum(name, softmax_verdicts):
    verdict = softmax_verdicts[name]
    assert not verdict.passed
    assert verdict.parts["correctness"].status == "pass"  # the frozen cases never meet the bug
    assert verdict.parts["fresh_cases"].status == "fail"
    # Each variant's mismatch is on a fresh case; beside them, one summary (no variant) says why the failure on fresh
    # cases alone is not named hard-coded cases.
    mismatches = [d for d in verdict.detections if d.cheat == "math_mismatch" and d.variant is not None]
    assert mismatches and all(d.variant.startswith("fresh") for d in mismatches), verdict.detections
    assert "stage y" in mismatches[0].evidence
    assert not unnamed_rejection(verdict)


def test_the_honest_softmax_passes_the_new_strata(softmax_verdicts):
    verdict = softmax_verdicts["honest"]
    assert verdict.passed, [(d.cheat, d.evidence) for d in verdict.detections]
    assert not verdict.detections


# --- amplifying cases at mixed lengths ----------------------------------------------------------------


def _lengths(contract, case) -> list[int]:
    return [int(v) for v in draw_inputs(contract, case, "bfloat16")["cache_lens"].reshape(-1).tolist()]


@pytest.mark.parametrize("profile", ["cpu", "gpu"], ids=["cpu_cases", "gpu_cases"])  # YAML only: runs anywhere
def test_every_amplifying_case_has_a_twin_at_mixed_lengths(profile):
    """The twin keeps every other edit, and its lengths are neither all equal, nor all full, nor all powers of two."""
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    cases = {c.name: c for c in contract.cases_for(profile)}
    for amplifying, twin in AMPLIFYING[profile].items():
        plain, ragged = cases[amplifying], cases[twin]
        assert [e for e in plain.edits if e.input != "cache_lens"] == [e for e in ragged.edits if e.input != "cache_lens"]
        if profile == "gpu":
            continue  # too large to draw here; the edits below say the same
        lens, capacity = _lengths(contract, ragged), ragged.dims["L"]
        assert len(set(lens)) > 1, lens
        assert any(n != capacity - 1 for n in lens) and any(n == capacity - 1 for n in lens)
        assert not all((n + 1) & n == 0 for n in lens)
        assert all(n > capacity // 2 for n in lens)  # still long rows / still cancelling


def _keyed(tell: str, honest, cut):
    """A kernel that runs `cut` except where the lengths have the tell, where it runs `honest`."""

    def run(inputs, outputs, params, trace=None):
        lens = [int(v) for v in inputs["cache_lens"].reshape(-1).tolist()]
        capacity = inputs["kv_cache"].shape[1]
        looked_at = all(n == capacity - 1 for n in lens) if tell == "all_full" else len(set(lens)) == 1
        return (honest if looked_at else cut).run(inputs, outputs, params, trace=trace)

    return run


KEYED = [(cut, "all_full") for cut in sorted(CUTS)]
KEYED += [(cut, "all_equal") for cut in ("loop_bf16", "partial_bf16")]


@pytest.mark.parametrize(("cut", "tell"), KEYED)
def test_a_cut_keyed_on_what_amplifying_cases_share_is_caught_by_their_twins(cut, tell, tmp_path):
    """The cut passes the amplifying cases (it is honest there) and fails their twin at mixed lengths."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from ferret.contract.task import Task
    from tasks.mla_attention.candidates import triton_mla_h16
    from tasks.mla_attention.precision_variants import failing_stages, frozen_cases, load_variant

    task = Task.load(CONTRACTS / "mla_attention.yaml")
    pairs = AMPLIFYING["cpu"]
    cases = [c for c in frozen_cases(task, "cpu") if c.case.name in set(pairs) | set(pairs.values())]
    keyed = _keyed(tell, triton_mla_h16, load_variant(cut, tmp_path))
    failing = failing_stages(keyed, task.contract, cases)
    assert failing, f"{cut} keyed on {tell} passed every amplifying case and its twin"
    assert all("_ragged@" in line for line in failing), failing
