"""Boundaries a contract declares (cases.boundaries) and the strata derived from them; a bad declaration is
a contract error naming the file and the field."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, line_after, write_contract  # noqa: E402

from ferret.contract.load import ContractError, load_contract  # noqa: E402


def _with_boundaries(*boundaries: dict):
    def mutate(data: dict) -> None:
        data["cases"]["boundaries"] = list(boundaries)

    return mutate


def _error(path: Path) -> str:
    with pytest.raises(ContractError) as info:
        load_contract(path)
    return str(info.value)


@pytest.mark.parametrize("op", ["mla_attention", "rmsnorm", "softmax", "rope"])
def test_every_shipped_contract_declares_boundaries_on_both_profiles(op):
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        names = [s.name for s in contract.strata(profile)]
        assert any(n.endswith(":below") for n in names) and any(n.endswith(":above") for n in names), (op, profile)
        # the others as one class, or (either_side) one below and one above a multiple
        others = any(n.endswith(":other") for n in names) or {":multiple-1", ":multiple+1"} <= {n[n.rfind(":") :] for n in names}
        assert any(n.endswith(":multiple") for n in names) and others, (op, profile)
        assert any(n.endswith(":lowest") for n in names), (op, profile)


def test_strata_of_a_boundary_are_its_two_sides_and_the_lowest_values():
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    strata = {s.name: s for s in contract.strata("cpu")}
    dims = {"B": 2, "H": 1, "L": 40}
    full_below, full_above = strata["cache_full:below"], strata["cache_full:above"]
    assert full_below.bounds(dims) == (0, 38) and full_above.bounds(dims) == (39, 39)
    assert strata["cache_lens:lowest"].bounds(dims) == (0, 0) and strata["cache_lens:second"].bounds(dims) == (1, 1)
    multiple = strata["token_multiple:multiple"]
    assert {multiple.draw(random.Random(seed), dims) for seed in range(20)} == {31}  # 31 + 1 attended tokens
    # either_side: one attended token short of a whole block (cache length 30), and the new token alone in a new
    # block (cache length 32); the first value past a boundary exactly (the new token at row 32: a second block).
    below, above = strata["token_multiple:multiple-1"], strata["token_multiple:multiple+1"]
    assert {below.draw(random.Random(seed), dims) for seed in range(20)} == {30}
    assert {above.draw(random.Random(seed), dims) for seed in range(20)} == {32} and not above.admits(31, dims)
    assert strata["token_block:first"].bounds(dims) == (32, 32)
    # A dim's upper side reaches past the CPU fresh range where the boundary says so (B in [1, 3]; 17 here).
    assert strata["batch_block:above"].bounds({}) == (17, 17)
    assert "head_block:above" not in strata and "head_block:above" in {s.name for s in contract.strata("gpu")}


def test_a_neighbour_of_a_multiple_is_drawn_behind_a_whole_block_where_the_range_reaches_one():
    """N = 127 is a one-tile row, not a tile one short behind full ones (a tail bug there is invisible), and N = 1 is
    a lone column with no block before it: both neighbours are drawn from the second block on, yet a range too short
    for that still draws its first-block value rather than nothing."""
    strata = {s.name: s for s in load_contract(CONTRACTS / "softmax.yaml").strata("cpu")}
    below, above = strata["column_block:multiple-1"], strata["column_block:multiple+1"]
    drawn_below = sorted({n for seed in range(200) if (n := below.draw(random.Random(seed), {})) is not None})
    drawn_above = sorted({n for seed in range(200) if (n := above.draw(random.Random(seed), {})) is not None})
    assert drawn_below[0] == 255 and all(n % 128 == 127 for n in drawn_below), drawn_below
    assert drawn_above[0] == 129 and all(n % 128 == 1 for n in drawn_above), drawn_above
    assert replace(below, high="200").draw(random.Random(0), {}) == 127  # one block only: its one such value
    assert strata["column_block:multiple"].draw(random.Random(0), {}) % 128 == 0
    # Nor does a first-block value cover the stratum where it is drawn behind a block: N = 1 is no masked tail.
    assert not above.admits(1, {}) and not below.admits(127, {}) and above.admits(129, {}) and below.admits(255, {})
    assert replace(below, high="200").admits(127, {})


def test_the_second_lowest_value_is_empty_where_the_range_has_one_value():
    """A cache of capacity 1 has no past length 1: the stratum draws nothing there (it drew 1, and the reference
    indexed past the cache), and the fresh cases of a contract planned over many checks stay inside their ranges."""
    from ferret.gate.fresh import plan_fresh_cases
    from ferret.gate.inputs import draw_inputs

    contract = load_contract(CONTRACTS / "mla_attention_fp8.yaml")
    second = {s.name: s for s in contract.strata("cpu")}["cache_lens:second"]
    assert second.bounds({"B": 1, "H": 1, "L": 1}) == (1, 0) and second.draw(random.Random(0), {"L": 1}) is None
    assert second.bounds({"B": 1, "H": 1, "L": 2}) == (1, 1)
    for seed in range(40):  # seed 15 drew a one-row cache with past length 1 before
        for case, _ in plan_fresh_cases(contract, "cpu", random.Random(seed)):
            lens = draw_inputs(contract, case, "bfloat16")["cache_lens"]
            assert int(lens.max()) <= case.dims["L"] - 1, (seed, case.dims, lens.tolist())


def test_an_unknown_dim_names_the_file_and_the_field(tmp_path):
    path = write_contract(tmp_path, _with_boundaries({"name": "rows", "dim": "Q", "at": 17}))
    message = _error(path)
    assert f"{path}:" in message and "cases.boundaries.rows.dim: 'Q' is not a dim" in message, message
    assert f"{path}:{line_after(path, 'name: rows', 'dim: Q')}: cases.boundaries.rows.dim:" in message, message


def test_a_side_that_cannot_be_drawn_names_the_file_and_the_field(tmp_path):
    # N's CPU fresh range stops at 2000: the upper side of 16385 is empty unless up_to reaches past it.
    path = write_contract(tmp_path, _with_boundaries({"name": "long_rows", "dim": "N", "at": 16385}))
    message = _error(path)
    assert f"{path}:" in message and "cases.boundaries.long_rows.at: side above is empty on the cpu profile" in message
    path = write_contract(tmp_path, _with_boundaries({"name": "long_rows", "dim": "N", "at": 16385, "up_to": 17000}))
    assert [b.name for b in load_contract(path).cases.boundaries] == ["long_rows"]


@pytest.mark.parametrize(
    "boundary,field,text",
    [
        ({"name": "b", "dim": "N", "input": "x", "at": 3}, "cases.boundaries.0", "exactly one of dim and input"),
        ({"name": "b", "dim": "N", "at": 3, "multiple_of": 16}, "cases.boundaries.0", "exactly one of at and multiple_of"),
        ({"name": "b", "dim": "N", "multiple_of": 16, "remainder": 16}, "cases.boundaries.0", "must be below multiple_of"),
        ({"name": "b", "dim": "N", "multiple_of": 1}, "cases.boundaries.0.multiple_of", "greater than or equal to 2"),
        ({"name": "b", "input": "x", "at": 3}, "cases.boundaries.b.input", "not an input with a randint distribution"),
        ({"name": "b", "dim": "N", "at": "M + 1"}, "cases.boundaries.b.at", "unknown dim 'M'"),
        ({"name": "b", "dim": "N", "at": 3, "profiles": ["tpu"]}, "cases.boundaries.0.profiles.0", "Input should be"),
        ({"name": "b", "dim": "N", "at": 3, "stride": 2}, "cases.boundaries.0.stride", "Extra inputs are not permitted"),
    ],
)
def test_a_bad_boundary_is_a_contract_error_naming_the_file_and_the_field(tmp_path, boundary, field, text):
    path = write_contract(tmp_path, _with_boundaries(boundary))
    message = _error(path)
    assert f"{path}:" in message and f"{field}: " in message and text in message, message


def test_duplicate_boundary_names_are_refused(tmp_path):
    path = write_contract(tmp_path, _with_boundaries({"name": "b", "dim": "N", "at": 3}, {"name": "b", "dim": "M", "at": 3}))
    assert "cases.boundaries.b: duplicate boundary name" in _error(path)


def test_edits_that_do_not_fit_the_fresh_ranges_are_refused(tmp_path):
    """Fresh cases carry the edits of edge cases: an edit outside every fresh shape would never be carried."""

    def mutate(data: dict) -> None:
        data["cases"]["cpu"].append(
            {
                "name": "far_row",
                "kind": "edge",
                "dims": {"M": 40, "N": 4},
                "seed": 9,
                "edits": [{"input": "x", "set": "zeros_rows", "rows": [30]}],
            }
        )

    path = write_contract(tmp_path, mutate)
    message = _error(path)
    assert f"{path}:" in message and "cases.cpu.far_row.edits: name rows or entries outside" in message, message
