"""Fresh private cases, stratified: every check covers both sides of every boundary a contract declares, the
lowest values of every quantity a boundary names, and the edits of every edge case; a kernel wrong
only past a boundary is rejected by every check, an honest one keeps passing."""

from __future__ import annotations

import itertools
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO, unnamed_rejection  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.model import Case, Contract, ProfileName, RandInt  # noqa: E402
from ferret.contract.shapes import evaluate  # noqa: E402
from ferret.gate.fresh import draw_fresh_cases, plan_fresh_cases  # noqa: E402
from ferret.gate.inputs import draw_inputs  # noqa: E402

SHIPPED = ["mla_attention", "rmsnorm", "softmax", "rope"]
SOFTMAX_CONTRACT = CONTRACTS / "softmax.yaml"
HONEST_SOFTMAX = REPO / "tasks" / "softmax" / "candidates" / "triton_softmax.py"


def _values(contract: Contract, case: Case, profile: str, quantity: str, is_dim: bool) -> list[int]:
    """The values a quantity takes in one planned case: a dim's value; an input's entries as drawn (CPU), or on
    the GPU profile (too large to draw here) its entries the case sets by edits."""
    if is_dim:
        return [case.dims[quantity]]
    if profile == "cpu":
        return [int(v) for v in draw_inputs(contract, case, contract.primary_dtype)[quantity].reshape(-1).tolist()]
    return [evaluate(e.value, case.dims) for e in case.edits if e.input == quantity and e.set == "value" and e.value is not None]


def _sides_seen(contract: Contract, profile: ProfileName, seed: int) -> dict[str, set[str]]:
    """For one check's fresh cases, drawn with this seed: each boundary's sides (or classes) and each named
    quantity's lowest values seen, computed from the declarations, not from the strata the judge derives."""
    seen: dict[str, set[str]] = {}
    cases = [
        case.model_copy(update={"seed": seed * 100 + n})
        for n, (case, _) in enumerate(plan_fresh_cases(contract, profile, random.Random(seed)))
    ]
    ranges = getattr(contract.cases.fresh, profile)
    for boundary in contract.cases.boundaries:
        if profile not in boundary.profiles:
            continue
        is_dim = boundary.dim is not None
        quantity = boundary.dim if is_dim else boundary.input
        assert quantity is not None
        spec = next((i for i in contract.inputs if i.name == quantity), None)
        for case in cases:
            if is_dim:
                lowest = ranges[quantity][0]
            else:
                assert spec is not None and isinstance(spec.distribution, RandInt)
                lowest = evaluate(spec.distribution.low, case.dims)
            for value in _values(contract, case, profile, quantity, is_dim):
                marks = seen.setdefault(boundary.name, set())
                if boundary.at is not None:
                    marks.add("below" if value < evaluate(boundary.at, case.dims) else "above")
                else:
                    assert boundary.multiple_of is not None
                    marks.add("multiple" if value % boundary.multiple_of == boundary.remainder else "other")
                if value - lowest in (0, 1):
                    seen.setdefault(f"{quantity}:lowest", set()).add(str(value - lowest))
    return seen


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
@pytest.mark.parametrize("op", SHIPPED)
def test_every_check_covers_both_sides_of_every_declared_boundary(op, profile):
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    declared = [b for b in contract.cases.boundaries if profile in b.profiles]
    assert declared, f"contracts/{op}.yaml declares no boundary for the {profile} profile"
    for seed in range(4 if profile == "cpu" else 12):  # each seed stands for one check's OS-random draws
        seen = _sides_seen(contract, profile, seed)
        for boundary in declared:
            wanted = {"below", "above"} if boundary.at is not None else {"multiple", "other"}
            assert seen.get(boundary.name) == wanted, (op, profile, seed, boundary.name, seen.get(boundary.name))
            quantity = boundary.dim or boundary.input
            # A dim's lowest value (1: it is at least 1); an input's two lowest (past lengths 0 and 1).
            lowest = {"0"} if boundary.dim is not None else {"0", "1"}
            assert lowest <= seen.get(f"{quantity}:lowest", set()), (op, profile, seed, quantity)


@dataclass(frozen=True)
class _Block:
    """A block boundary on a dim, read from a contract's declarations."""

    dim: str
    size: int
    remainder: int
    either_side: bool


def _blocks(contract: Contract, profile: str) -> list[_Block]:
    return [
        _Block(b.dim, b.multiple_of, b.remainder, b.either_side)
        for b in contract.cases.boundaries
        if b.dim is not None and b.multiple_of is not None and profile in b.profiles
    ]


def _tail_classes(block: _Block) -> dict[str, int | None]:
    """A block's tail classes, as remainders modulo it: one short of and one past a multiple (either_side), or every
    value off it (None)."""
    if block.either_side:
        return {"multiple-1": (block.remainder - 1) % block.size, "multiple+1": (block.remainder + 1) % block.size}
    return {"other": None}


def _in_tail(value: int, block: _Block, remainder: int | None) -> bool:
    got = value % block.size
    return got != block.remainder if remainder is None else got == remainder


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_every_check_has_each_dims_tail_alone_with_the_other_dims_whole(op):
    """A grid rounded down along the rows (`M // block_m`) misses the rows past the last whole row block; with a
    column tail in the same case, a kernel can switch that cut off where the row is masked and still be wrong on
    every case whose columns are whole. So each check holds, for each block dim's tail, a case where that dim is
    off its block and every other block dim a whole number of blocks (read from the declarations here)."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        blocks = _blocks(contract, profile)
        assert len({b.dim for b in blocks}) >= 2, (op, profile, "the test needs two block dims")
        for seed in range(6):
            planned = [case.dims for case, _ in plan_fresh_cases(contract, profile, random.Random(seed))]
            for block in blocks:
                others = [b for b in blocks if b.dim != block.dim]
                for side, remainder in _tail_classes(block).items():
                    alone = [
                        dims
                        for dims in planned
                        if _in_tail(dims[block.dim], block, remainder)
                        and all(dims[o.dim] % o.size == o.remainder for o in others)
                    ]
                    assert alone, (op, profile, seed, block.dim, side, planned)


def _region_classes(contract: Contract, profile: str) -> list[tuple[str, str, str, int, int, int, int]]:
    """(region, class, dim, low, high, block, remainder) for each block class of a dim within each side of the same
    dim's `at` boundaries, read from the declarations: the class's values one short of and one past a multiple only
    behind a whole block."""
    ranges = getattr(contract.cases.fresh, profile)
    found = []
    for region in contract.cases.boundaries:
        dim = region.dim
        if dim is None or region.at is None or profile not in region.profiles:
            continue
        low, high = ranges[dim]
        top = max(high, region.up_to or 0)
        at = evaluate(region.at, {})
        for side, (lo, hi) in {"below": (low, min(at - 1, high)), "above": (at, top)}.items():
            for block in (b for b in _blocks(contract, profile) if b.dim == dim):
                for name, remainder in {"multiple": block.remainder, **_tail_classes(block)}.items():
                    assert remainder is not None, "the shipped contracts' blocks are either_side"
                    start = max(lo, block.size if name != "multiple" else lo)
                    if any(v % block.size == remainder for v in range(start, hi + 1)):
                        found.append((f"{region.name}:{side}", name, dim, start, hi, block.size, remainder))
    return found


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_every_check_judges_each_side_of_a_boundary_with_whole_blocks_and_with_each_tail(op):
    """Rows past 16384 elements take a loop over blocks of their own; a cut there switched on only where the row has
    no masked tail (N a multiple of 16) was met by a random draw from that side in 1 check of 16. Each side of a
    dim's boundary now holds each block class of the dim: whole, one short, one past."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        classes = _region_classes(contract, profile)
        assert any(region == "one_block_row:above" and name == "multiple" for region, name, *_ in classes)
        for seed in range(6):
            planned = [case.dims for case, _ in plan_fresh_cases(contract, profile, random.Random(seed))]
            for region, name, dim, low, high, block, remainder in classes:
                held = [d for d in planned if low <= d[dim] <= high and d[dim] % block == remainder]
                assert held, (op, profile, seed, region, name, planned)


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_each_dims_tail_meets_the_other_dims_whole_blocks_on_each_side_of_their_boundaries(op):
    """A row grid rounded down only above a size misses rows only where the columns are whole and long: a row tail
    met by whole columns drawn at random from their whole range is long only by chance. Each tail of a dim meets
    the whole blocks of each other dim on each side of that dim's boundaries, every third block dim whole."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        blocks = _blocks(contract, profile)
        sides = [c for c in _region_classes(contract, profile) if c[1] == "multiple"]
        assert any(region == "one_block_row:above" for region, *_ in sides)
        for seed in range(6):
            planned = [case.dims for case, _ in plan_fresh_cases(contract, profile, random.Random(seed))]
            for block in blocks:
                for tail, remainder in _tail_classes(block).items():
                    for region, _, dim, low, high, size, whole in (c for c in sides if c[2] != block.dim):
                        met = [
                            d
                            for d in planned
                            if _in_tail(d[block.dim], block, remainder)
                            and low <= d[dim] <= high
                            and d[dim] % size == whole
                            and all(d[b.dim] % b.size == b.remainder for b in blocks if b.dim not in (block.dim, dim))
                        ]
                        assert met, (op, profile, seed, block.dim, tail, region, planned)


ALL_CONTRACTS = sorted(p.stem for p in CONTRACTS.glob("*.yaml") if not p.stem.endswith(".tolerances"))


@pytest.mark.parametrize("op", ALL_CONTRACTS)
def test_every_check_meets_the_two_lowest_values_of_every_pair_of_dims(op):
    """A path a kernel takes only where its whole grid is one or two programs (one request of two heads) shows only
    where both dims are that low and another has work (one cached token gives every head the same answer): each
    pair of dims' lowest two values, all four combinations, beside a third dim two or more past its lowest, in
    every check, and (CPU) each such case's inputs can be drawn."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        ranges = dict(getattr(contract.cases.fresh, profile))
        room = {d: min(low + 2, high) for d, (low, high) in ranges.items()}
        for seed in range(4):
            planned = plan_fresh_cases(contract, profile, random.Random(seed))
            for a, b in itertools.combinations(ranges, 2):
                others = [d for d in ranges if d not in (a, b)]
                for x in {ranges[a][0], min(ranges[a][0] + 1, ranges[a][1])}:
                    for y in {ranges[b][0], min(ranges[b][0] + 1, ranges[b][1])}:
                        assert any(
                            c.dims[a] == x and c.dims[b] == y and (not others or any(c.dims[d] >= room[d] for d in others))
                            for c, _ in planned
                        ), (op, profile, seed, a, x, b, y)
            if profile == "cpu" and seed == 0:
                for case, strata in planned:
                    if any(s.startswith("lowest pairs") for s in strata):
                        draw_inputs(contract, case.model_copy(update={"seed": 1}), contract.primary_dtype)


# Cuts of the honest softmax's long-row path (rows past 16384 elements), each switched on where a random draw from
# that side meets it only sometimes: the last 512 columns ignored (its statistics and its output) where the row has
# no masked tail; the last row never written at odd row counts of at least 3 (a mutation audit's survivor, met by
# about three checks in five before each row tail met the long rows' whole blocks).
_LONG_ROW_CUTS = {
    "last_block_skipped_without_a_tail": (
        "            x, y, row_max, row_sum, N, x.stride(0), y.stride(0),\n",
        "            x, y, row_max, row_sum, N - (N % 16 == 0) * 512, x.stride(0), y.stride(0),\n",
    ),
    "last_row_unwritten_at_odd_rows": (
        "        _softmax_long_row_kernel[(M,)](\n",
        "        _softmax_long_row_kernel[(M - (M % 2 == 1 and M >= 3),)](\n",
    ),
}


@pytest.mark.parametrize("cut", sorted(_LONG_ROW_CUTS))
def test_a_long_row_cut_met_by_chance_before_is_rejected_by_every_check(cut, softmax_gates, tmp_path):
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    source = HONEST_SOFTMAX.read_text()
    old, new = _LONG_ROW_CUTS[cut]
    assert source.count(old) == 1
    mutant = tmp_path / f"softmax_{cut}.py"
    mutant.write_text(source.replace(old, new))
    judge = Judge(Task.load(SOFTMAX_CONTRACT), gates_dir=softmax_gates, profile="cpu")
    for _ in range(2):
        verdict = judge.check(mutant, measure_speed=False)
        assert not verdict.passed
        assert all(verdict.parts[p].status == "pass" for p in ("correctness", "edge_cases")), verdict.parts
        assert verdict.parts["fresh_cases"].status == "fail"
        assert unnamed_rejection(verdict) is None


# The honest RMSNorm with its grid rounded down along the rows, switched on only where the row has no masked column
# tail (N a multiple of 16): rows past the last whole row block are never written. A mutation audit's survivor
# before fresh cases held each dim's tail alone.
# The same cut switched on only above a size (more than 16384 elements): a row tail must meet whole columns long
# enough, not whole columns drawn at random from their whole range.
_ROWS_ROUNDED_DOWN = {
    "columns_whole": "M // block_m if N % 16 == 0 else triton.cdiv(M, block_m)",
    "columns_whole_above_size": "M // block_m if N % 16 == 0 and M * N > 16384 else triton.cdiv(M, block_m)",
}
_FUSED_GRID = "        _rmsnorm_fused_kernel[(triton.cdiv(M, block_m),)](\n"


def _rows_missed(dims: dict[str, int], cut: str) -> bool:
    """Whether the mutant leaves rows unwritten at these dims (the candidate's own choice of row block)."""
    from tasks.rmsnorm.candidates.triton_rmsnorm import FUSED_MAX_N, MIN_TILE

    m, n = dims["M"], dims["N"]
    block_n = 1 << (n - 1).bit_length()
    block_m = min(max(1, MIN_TILE // block_n), 1 << (m - 1).bit_length())
    switched_on = n % 16 == 0 and (cut == "columns_whole" or m * n > 16384)
    return switched_on and block_n <= FUSED_MAX_N and m % block_m != 0


@pytest.mark.parametrize("cut", sorted(_ROWS_ROUNDED_DOWN))
def test_a_row_grid_rounded_down_where_columns_are_whole_is_rejected_by_the_fresh_cases(cut, tmp_path, monkeypatch):
    import ferret.gate.judge as judge_module
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    drawn: dict[str, dict[str, int]] = {}

    def recording(*args, **kwargs):
        fresh = draw_fresh_cases(*args, **kwargs)
        drawn.update({f.id: f.case.dims for f in fresh})
        return fresh

    monkeypatch.setattr(judge_module, "draw_fresh_cases", recording)
    contract_path = CONTRACTS / "rmsnorm.yaml"
    source = (REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py").read_text()
    assert source.count(_FUSED_GRID) == 1
    mutant = tmp_path / "rmsnorm_rows_rounded_down.py"
    mutant.write_text(source.replace(_FUSED_GRID, _FUSED_GRID.replace("triton.cdiv(M, block_m)", _ROWS_ROUNDED_DOWN[cut])))
    assert not any(_rows_missed(c.dims, cut) for c in load_contract(contract_path).cases_for("cpu"))
    judge = Judge(Task.load(contract_path), gates_dir=tmp_path / "gates", profile="cpu")
    for _ in range(3):  # each check draws anew: every one must hold a case that shows the cut
        drawn.clear()
        verdict = judge.check(mutant, measure_speed=False)
        assert not verdict.passed
        # Every frozen case has whole row blocks where its columns are whole: only the fresh cases show the cut.
        assert all(verdict.parts[p].status == "pass" for p in ("correctness", "edge_cases")), verdict.parts
        assert verdict.parts["fresh_cases"].status == "fail"
        failing = {r.id for r in verdict.variants if r.part == "fresh_cases" and not r.passed}
        assert failing == {i for i, dims in drawn.items() if _rows_missed(dims, cut)}, (failing, drawn)
        assert unnamed_rejection(verdict) is None


@pytest.mark.parametrize("op", SHIPPED)
def test_every_check_carries_the_edits_of_every_edge_case(op):
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        edited = [c for c in contract.cases_for(profile) if c.kind == "edge" and c.edits]
        for seed in range(3):
            planned = [case for case, _ in plan_fresh_cases(contract, profile, random.Random(seed))]
            for edge in edited:
                carriers = [c for c in planned if all(e in c.edits for e in edge.edits)]
                assert carriers, (op, profile, edge.name)
                assert all(c.name.startswith("fresh") and c.seed == 0 for c in carriers)  # seeds drawn by the judge


@pytest.mark.parametrize("op", SHIPPED)
def test_no_case_drawn_for_dim_strata_carries_an_edge_cases_edits(op):
    """Zero rows carried on the long-row case a whole number of blocks set its inv_rms scale (1/sqrt(eps), a hundred
    times the other rows'), and a row wrong by ten times the tolerance passed the stage-wide bounds: a case drawn
    for a view of the dims carries no edits."""
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    for profile in ("cpu", "gpu"):
        dim_strata = {s.name for s in contract.strata(profile) if s.kind == "dim"}
        edge_edits = [e for c in contract.cases_for(profile) if c.kind == "edge" for e in c.edits]
        carrying = 0
        for seed in range(4):
            for case, strata in plan_fresh_cases(contract, profile, random.Random(seed)):
                carried = [e for e in case.edits if e in edge_edits]
                carrying += bool(carried)
                assert not (carried and set(strata) & dim_strata), (op, profile, case.dims, strata, carried)
        # The edge edits are still in every check (test_every_check_carries_the_edits_of_every_edge_case), here too.
        assert carrying >= 4 * bool(edge_edits), (op, profile, carrying)


def test_edge_cases_making_the_same_edit_share_one_fresh_case(tmp_path):
    """Two edge cases that make the same edit (a full cache, say) are carried together: no extra case to run."""
    from ferret_testkit import write_contract

    def twin(data: dict) -> None:
        zero_rows = next(c for c in data["cases"]["cpu"] if c["name"] == "zero_rows")
        data["cases"]["cpu"].append({**zero_rows, "name": "zero_rows_again", "seed": 99})

    plain = load_contract(CONTRACTS / "rmsnorm.yaml")
    doubled = load_contract(write_contract(tmp_path, twin))
    for seed in range(3):
        planned = plan_fresh_cases(doubled, "cpu", random.Random(seed))
        assert len(planned) == len(plan_fresh_cases(plain, "cpu", random.Random(seed)))
        carrier = [c for c, _ in planned if "zero_rows_again" in c.description]
        assert len(carrier) == 1 and "zero_rows," in carrier[0].description, [c.description for c, _ in planned]


def test_fresh_values_are_drawn_anew_within_their_strata():
    """Two checks do not see the same fresh cases: values are random within each stratum."""
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    first = plan_fresh_cases(contract, "cpu", random.Random(1))
    second = plan_fresh_cases(contract, "cpu", random.Random(2))
    assert [c.dims for c, _ in first] != [c.dims for c, _ in second]
    assert {s for _, strata in first for s in strata} == {s for _, strata in second for s in strata}


def test_the_cpu_strata_cases_are_cheap_shapes():
    """A stratum past the fresh ranges (a boundary's up_to: B 17 for MLA on the CPU) has a case of its own
    whose other dims stay in the lower half of their ranges, or at the smallest whole number of their blocks where
    the case holds a tail (a long row one column past a block comes with 16 rows), or one short of or past it where
    the case holds that dim's tail (a long whole row comes with 15 or 17 rows), and MLA's strata cases have
    few heads (the interpreter's cost grows with them), so that the CPU profile stays fast."""
    for op in SHIPPED:
        contract = load_contract(CONTRACTS / f"{op}.yaml")
        ranges = contract.cases.fresh.cpu if contract.cases.fresh else {}
        blocks = {b.dim: b.multiple_of for b in contract.cases.boundaries if b.dim and b.multiple_of}
        seen_past = 0
        for seed in range(10):
            for case, strata in plan_fresh_cases(contract, "cpu", random.Random(seed)):
                past = [d for d, v in case.dims.items() if v > ranges[d][1]]
                assert len(past) <= 1, (op, case.dims)
                seen_past += bool(past)
                for dim, value in case.dims.items():
                    low, high = ranges[dim]
                    next_to_block = dim in blocks and abs(value - blocks[dim]) <= 1
                    assert not past or dim in past or next_to_block or value <= low + (high - low) // 2, (op, case.dims)
                if op == "mla_attention" and strata:
                    assert case.dims["H"] <= 3, case.dims
        assert seen_past >= 10, op  # each declares an up_to on the CPU profile: a case past it every check


# A realistic cut of the honest softmax: rows too long for one block take the row's max and sum of
# exponentials from its first 8192 entries only ("the rest barely moves them"). Only rows past 16384
# elements take that path: no frozen CPU case is that long (the longest is 9000) and the fresh ranges'
# uniform draws stop at 3000, so only the stratum past the contract's one_block_row boundary sees it.
_FIRST_BLOCK_STATISTICS = [
    (
        "    for start in range(0, N, BLOCK_N):\n        offs = start + cols\n"
        '        x = tl.load(x_row + offs, mask=offs < N, other=float("-inf"), eviction_policy="evict_last")\n',
        "    for start in range(0, BLOCK_N, BLOCK_N):\n        offs = start + cols\n"
        '        x = tl.load(x_row + offs, mask=offs < N, other=float("-inf"), eviction_policy="evict_last")\n',
    ),
]


@pytest.fixture(scope="module")
def softmax_gates(tmp_path_factory):
    from ferret.gate.build import build_gate

    folder = tmp_path_factory.mktemp("softmax-gates")
    build_gate(SOFTMAX_CONTRACT, folder, "cpu")
    return folder


def _cut_shows(fresh, contract: Contract) -> bool:
    """Whether the gate's own comparison (`compare_stage`, the contract's tolerance) tells the mutant's first-block
    row max or row sum from the golden ones on this fresh variant's inputs: rows of nearly one-hot values, or a
    masked tail, can hide a short cut (in 1 of 600 draws of the judge's fresh plan, 2026-12-01)."""
    from ferret.gate.metrics import compare_stage

    x = fresh.inputs["x"].float()
    if x.shape[-1] <= 16384:
        return False
    head = x[:, :8192]  # the mutant's statistics: its first block of LONG_ROW_BLOCK entries, in float32
    row_max = head.max(-1).values
    cut = {"row_max": row_max, "row_sum": torch.exp(head - row_max[:, None]).sum(-1)}
    stages = {stage.name: stage for stage in contract.stages}
    return any(
        not compare_stage(cut[name], fresh.golden[name], stages[name], contract.tolerance(fresh.dtype, name, None)).passed
        for name in cut
    )


def test_a_kernel_wrong_past_a_boundary_is_rejected_by_every_check_whose_inputs_show_it(softmax_gates, tmp_path, monkeypatch):
    import ferret.gate.judge as judge_module
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    drawn: dict[str, dict[str, int]] = {}
    shows: list[bool] = []

    def recording(*args, **kwargs):
        fresh = draw_fresh_cases(*args, **kwargs)
        drawn.update({f.id: f.case.dims for f in fresh})
        shows.append(any(_cut_shows(f, contract) for f in fresh))
        return fresh

    monkeypatch.setattr(judge_module, "draw_fresh_cases", recording)

    source = HONEST_SOFTMAX.read_text()
    for old, new in _FIRST_BLOCK_STATISTICS:
        assert source.count(old) == 1
        source = source.replace(old, new)
    mutant = tmp_path / "softmax_first_block_statistics.py"
    mutant.write_text(source)
    contract = load_contract(SOFTMAX_CONTRACT)
    assert max(c.dims["N"] for c in contract.cases_for("cpu")) <= 16384
    assert contract.cases.fresh is not None and contract.cases.fresh.cpu["N"][1] <= 16384

    judge = Judge(Task.load(SOFTMAX_CONTRACT), gates_dir=softmax_gates, profile="cpu")
    for _ in range(3):
        verdict = judge.check(mutant, measure_speed=False)
        # Every frozen case passes: only the fresh stratum past the boundary can catch the cut.
        assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "edge_cases")), verdict.parts
        if not shows[-1]:
            continue  # rows past 16384 that hide the cut: 1 of 600 draws of the judge's plan (2026-12-01)
        assert not verdict.passed
        assert verdict.parts["fresh_cases"].status == "fail"
        failing = [r.id for r in verdict.variants if r.part == "fresh_cases" and not r.passed]
        assert failing and all(drawn[i]["N"] > 16384 for i in failing), [(i, drawn[i]) for i in failing]
        assert unnamed_rejection(verdict) is None
        assert verdict.parts["integrity"].status == "pass", verdict.parts["integrity"].detail  # not a pattern's catch
    assert any(shows), "no check drew a row that shows the cut: the test saw nothing"

    honest = judge.check(HONEST_SOFTMAX, measure_speed=False)
    assert honest.passed, honest.parts
    long_rows = [r for r in honest.variants if r.part == "fresh_cases" and drawn[r.id]["N"] > 16384]
    assert long_rows and all(r.passed for r in long_rows)


# A cut of an honest MLA kernel, the template's point with the batch-block merge (starts[2], the default of
# 2026-12-01..02; the default's streamed merge has no batch blocks): "a decode batch fits one block of 16
# requests", so the merge and un-absorption launch one program per head and requests past 16 are never written.
# Every frozen CPU case and the uniform draws (B up to 3) have at most 16 requests: only the stratum past the
# contract's batch_block boundary (17 requests, few heads, short rows) sees it.
_ONE_BATCH_BLOCK = [
    ("    return min(64, max(16, triton.next_power_of_2(batch)))\n", "    return 16\n"),
    ("    _combine_unabsorb_kernel[(heads, triton.cdiv(batch, block_b))](\n", "    _combine_unabsorb_kernel[(heads, 1)](\n"),
]
MLA_CONTRACT = CONTRACTS / "mla_attention.yaml"
MLA_TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"


def _batch_block_merge_point() -> str:
    from ferret.roles.offline import TemplateSearchOptimizer

    optimizer = TemplateSearchOptimizer(MLA_TEMPLATES)
    space = optimizer.space
    return optimizer.render(space.canonical({**space.default, **space.starts[2]}))


def test_an_mla_kernel_wrong_past_the_batch_block_is_rejected_by_its_fresh_cases(tmp_path):
    """One whole check of the mutant. That every check draws the batch_block stratum (both sides of 17 requests) is
    test_every_check_covers_both_sides_of_every_declared_boundary's, over several checks' draws; a second check
    here cost another minute of CI under the interpreter and showed nothing more."""
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    source = _batch_block_merge_point()
    for old, new in _ONE_BATCH_BLOCK:
        assert source.count(old) == 1
        source = source.replace(old, new)
    mutant = tmp_path / "mla_one_batch_block.py"
    mutant.write_text(source)
    contract = load_contract(MLA_CONTRACT)
    assert max(c.dims["B"] for c in contract.cases_for("cpu")) <= 16
    judge = Judge(Task.load(MLA_CONTRACT), gates_dir=tmp_path / "gates", profile="cpu")
    verdict = judge.check(mutant, measure_speed=False)
    assert not verdict.passed
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "edge_cases")), verdict.parts
    assert verdict.parts["fresh_cases"].status == "fail"
    # Its requests past the first block are never written: where the run sees that, it is named on fresh cases only.
    seen_in_run = [d for d in verdict.detections if d.source in ("static", "runtime")]
    assert all(d.cheat == "unwritten_output" and (d.variant or "").startswith("fresh") for d in seen_in_run), [
        (d.cheat, d.variant) for d in seen_in_run
    ]
    assert unnamed_rejection(verdict) is None


def test_a_merge_wrong_only_for_one_request_of_two_heads_is_rejected_by_its_fresh_cases(tmp_path):
    """A mutation audit's survivor: the honest MLA candidate's single-row merge (taken where a merge program gets
    one (request, head) row: one request of two heads under the interpreter) reads head 0's partials for every head,
    only where the batch is odd. It needs B = 1 and H = 2 beside a cache of two tokens or more (one token gives every
    head the same answer), which no frozen case holds and random dims met by chance."""
    from ferret.audit.mutate import make_mutants, operator
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    honest = REPO / "tasks" / "mla_attention" / "candidates" / "triton_mla.py"
    made = make_mutants(honest.read_text(), honest.name, (operator("drop_term"),), size_threshold=1)
    (survivor,) = [m for m in made if m.id == "drop_term-4182a-right_term_dropped-some_requests"]
    diff = survivor.mutant.diff
    assert "-    part_row = partial_ptr + b * stride_part_b + h * stride_part_h\n" in diff, diff
    assert "+    part_row = partial_ptr + b * stride_part_b\n" in diff, diff
    mutant = tmp_path / "mla_merge_row_head0.py"
    mutant.write_text(survivor.source)
    judge = Judge(Task.load(MLA_CONTRACT), gates_dir=tmp_path / "gates", profile="cpu")
    verdict = judge.check(mutant, measure_speed=False)
    assert not verdict.passed
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "edge_cases")), verdict.parts
    assert verdict.parts["fresh_cases"].status == "fail"
    failed = [v.case for v in verdict.variants if v.part == "fresh_cases" and not v.passed]
    assert failed and unnamed_rejection(verdict) is None, failed
