"""Fresh private cases: drawn at check time with OS-random seeds, their golden values computed here, in the
judge, by the canonical reference. They are written nowhere the candidate can see before it has answered.

Every check draws (`plan_fresh_cases`):
1. strata cases: every stratum the contract's boundaries give the profile (`ferret/contract/strata.py`)
   holds a value in one of them, drawn at random within it. A dim's strata set the case's dims (one
   stratum per dim and case; a stratum reaching past the ranges has a case of its own; a dim's tail off a
   block multiple comes with every other block dim at a whole number of blocks); an input's strata
   set single entries (one request's cache length, say), several to a case, each entry covering every
   stratum its value falls in. Dims no stratum sets are drawn in the lower half of their fresh ranges
   where they can be, so that strata cases stay cheap (few heads, short rows);
2. `cases.fresh.count` cases with dims uniform in the contract's ranges;
3. the edits of the profile's edge cases, on fresh dims and seeds: edge cases that edit different inputs
   go together, carried by a case above (not one drawn for dim strata, whose view a zero or inf row would
   swamp) whose own values they leave as they are (it sets none of their
   inputs, or only entries equal to the value an edit sets) where they fit, else by a case of their own
   (dims in the lower half of the ranges where they fit there).
So no check leaves a side of a declared boundary to the luck of the draw.
"""

from __future__ import annotations

import itertools
import random
import secrets
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from ferret.contract.model import Case, Contract, Edit, ProfileName, edits_fit
from ferret.contract.shapes import evaluate, evaluate_shape
from ferret.contract.strata import Stratum, largest_dims
from ferret.contract.task import Task
from ferret.gate.inputs import draw_inputs, tensor_content_sha256

# Tries at dims uniform in the fresh ranges before a case that must hold something takes the top of them.
_DIM_TRIES = 200
# Fresh cases drawn at once (`draw_fresh_cases`); contracts plan four or five.
_DRAW_WORKERS = 4

# Draws of a strata case's dims, of which the one with room for the most input strata is kept.
_CASE_DRAWS = 16


@dataclass
class FreshVariant:
    id: str
    case: Case
    dtype: str
    seed: int
    inputs: dict[str, torch.Tensor]
    golden: dict[str, torch.Tensor]
    strata: tuple[str, ...] = ()

    def input_digests(self) -> dict[str, str]:
        return {n: tensor_content_sha256(t) for n, t in self.inputs.items()}


@dataclass
class _Plan:
    """One fresh case being planned: its dims, the entries set for input strata, the strata it covers."""

    dims: dict[str, int]
    strata: list[str] = field(default_factory=list)
    entries: dict[str, dict[int, int]] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)
    what: str = "uniform in the fresh ranges"
    carried: list[str] = field(default_factory=list)
    # Its dims were drawn for dim strata (a long row a whole number of blocks): it carries no edge case's edits,
    # whose rows (zeros, inf) would set the stage's scale and hide a wrong row of the view it is there for.
    holds_dim_strata: bool = False


def plan_fresh_cases(contract: Contract, profile: ProfileName, rng: random.Random) -> list[tuple[Case, tuple[str, ...]]]:
    """The fresh cases of one check (seeds 0 until drawn) and the strata each covers."""
    fresh = contract.cases.fresh
    ranges = _ranges(contract, profile)
    if fresh is None or not ranges:
        return []
    strata = contract.strata(profile)
    inputs = _InputStrata(contract, [s for s in strata if s.kind == "input"], rng)
    dim_strata = [s for s in strata if s.kind == "dim"]
    plans = _lowest_pairs_cases(ranges, rng, inputs, dim_strata)
    plans += _dim_strata_cases(dim_strata, ranges, rng, inputs, plans)
    plans += _input_strata_cases(contract, profile, inputs.pending, rng)
    plans += [_Plan({d: rng.randint(low, high) for d, (low, high) in ranges.items()}) for _ in range(fresh.count)]
    plans += _edge_cases(contract, profile, plans, rng)
    cases = []
    for number, plan in enumerate(plans, 1):
        edits = plan.edits + [
            _entry_edit(contract, name, index, value, plan.dims)
            for name, entries in plan.entries.items()
            for index, value in sorted(entries.items())
        ]
        what = "; ".join(([f"strata {', '.join(plan.strata)}"] if plan.strata else [plan.what]) + plan.carried)
        case = Case(
            name=f"fresh{number}",
            kind="correctness",
            dims=plan.dims,
            seed=0,
            edits=edits,
            description=f"drawn privately at check time: {what}",
        )
        cases.append((case, tuple(plan.strata)))
    return cases


def _dim_strata_cases(
    pending: list[Stratum],
    ranges: Mapping[str, tuple[int, int]],
    rng: random.Random,
    inputs: _InputStrata,
    planned: list[_Plan],
) -> list[_Plan]:
    """Cases whose dims cover every dim stratum: each case takes the first uncovered stratum of each dim, its
    other dims drawn in the lower half of their ranges (few heads, short rows: the interpreter stays fast).
    A stratum that lies past the fresh ranges (a boundary's `up_to`) takes a case of its own. A tail of one
    dim is drawn alone (`_tail_alone`), and meets the whole blocks of each other dim on each side of that dim's
    boundaries (`_unmet_tail_sides`). Of a few draws, the case keeps the one with room for the most pending
    input strata, and holds them at once, so that fewer cases are needed. A stratum a `planned` case holds takes no
    case of its own."""
    strata = list(pending)
    whole = {s.quantity: s for s in reversed(pending) if s.is_whole and not s.region}
    pending = [s for s in pending if not any(_holds_stratum(s, p.dims, whole) for p in planned)]
    plans = []
    while pending:
        past = next((s for s in pending if s.bounds({})[0] > ranges[s.quantity][1]), None)
        chosen: dict[str, Stratum] = {past.quantity: past} if past is not None else {}
        for stratum in pending if past is None else ():
            chosen.setdefault(stratum.quantity, stratum)
        dims = _drawn(_tail_alone(chosen, whole), ranges, rng, inputs)
        covered = [s.name for s in pending if _holds_stratum(s, dims, whole)]
        pending = [s for s in pending if s.name not in covered]
        plans.append(_Plan(dims, covered, holds_dim_strata=True))
        inputs.pending = _host(inputs.contract, plans[-1], inputs.pending, rng)
    while unmet := _unmet_tail_sides(strata, whole, planned + plans):
        tail, side = unmet[0]
        dims = _drawn({**whole, tail.quantity: tail, side.quantity: side}, ranges, rng, inputs)
        if not _meets(tail, side, dims, whole):
            # never expected: contract validation found both strata drawable; a loop here would never end
            raise ValueError(f"strata {tail.name} and {side.name} cannot be drawn in one case")
        plans.append(_Plan(dims, [f"{tail.name} with {side.name}"], holds_dim_strata=True))
        inputs.pending = _host(inputs.contract, plans[-1], inputs.pending, rng)
    return plans


def _drawn(
    chosen: Mapping[str, Stratum], ranges: Mapping[str, tuple[int, int]], rng: random.Random, inputs: _InputStrata
) -> dict[str, int]:
    """Dims with each chosen dim in its stratum and the others in the lower half of their ranges: of a few draws,
    the one with room for the most pending input strata."""
    draws = []
    for _ in range(_CASE_DRAWS):
        dims = {}
        for dim, (low, high) in ranges.items():
            value = chosen[dim].draw(rng, {}) if dim in chosen else None
            dims[dim] = value if value is not None else rng.randint(low, _half(low, high))
        draws.append(dims)
    return max(draws, key=inputs.room)


def _lowest_pairs_cases(
    ranges: Mapping[str, tuple[int, int]], rng: random.Random, inputs: _InputStrata, dim_strata: list[Stratum]
) -> list[_Plan]:
    """Cases in which the two lowest values of every pair of dims meet, all four combinations, each beside another
    dim drawn with room (two past its lowest, in the lower half of its range): a kernel takes paths of its own where
    its grid is one or two programs (one request of two heads: a merge of a single row), which a dim's lowest
    value beside other dims drawn at random meets only by chance, and which shows only where there is work
    along another dim (one cached token gives every head the same answer). Chosen greedily: each case leaves one
    dim with room and sets the others low, meeting the most unmet combinations (twelve cases for three dims or for
    four); with two dims, the four combinations alone. The dim with room takes a value of one of its strata no
    case holds yet where one lies there (a capacity one past a block, say): fewer cases of strata to come."""
    whole = {s.quantity: s for s in reversed(dim_strata) if s.is_whole and not s.region}
    dims = list(ranges)
    levels = {d: sorted({low, min(low + 1, high)}) for d, (low, high) in ranges.items()}
    unmet = {(a, x, b, y) for a, b in itertools.combinations(dims, 2) for x in levels[a] for y in levels[b]}
    shapes = [
        (free, dict(zip(low_dims, values, strict=True)))
        for free in (dims if len(dims) > 2 else [None])
        for low_dims in [[d for d in dims if d != free]]
        for values in itertools.product(*(levels[d] for d in low_dims))
    ]

    def met(low: Mapping[str, int]) -> set[tuple[str, int, str, int]]:
        return {(a, x, b, y) for a, x, b, y in unmet if low.get(a) == x and low.get(b) == y}

    added = []
    while unmet:
        free, low = max(shapes, key=lambda shape: len(met(shape[1])))
        meets = met(low)
        case_dims = dict(low)
        if free is not None:
            case_dims[free] = _with_room(ranges[free], rng, case_dims, [s for s in dim_strata if s.quantity == free])
        case_dims = {d: case_dims[d] for d in dims}
        held = [s for s in dim_strata if _holds_stratum(s, case_dims, whole)]
        dim_strata = [s for s in dim_strata if s not in held]
        names = [f"{a}={x} with {b}={y}" for a, x, b, y in sorted(meets)]
        added.append(_Plan(case_dims, [f"lowest pairs {', '.join(names)}", *(s.name for s in held)], holds_dim_strata=True))
        unmet -= meets
        inputs.pending = _host(inputs.contract, added[-1], inputs.pending, rng)
    return added


def _with_room(bounds: tuple[int, int], rng: random.Random, dims: Mapping[str, int], strata: list[Stratum]) -> int:
    """A dim's value two or more past its lowest: drawn at random within the first of its `strata` that has one there
    (a stratum's values are all met across checks, not only its smallest), else uniform in the lower half of its
    range (from two past the lowest)."""
    bottom, top = bounds
    room = min(bottom + 2, top)
    for stratum in strata:
        for value in (stratum.draw(rng, dims) for _ in range(8)):
            if value is not None and room <= value <= top:
                return value
    return rng.randint(room, max(_half(bottom, top), room))


def _holds_stratum(stratum: Stratum, dims: Mapping[str, int], whole: Mapping[str, Stratum]) -> bool:
    """Whether a case of these dims holds a dim stratum: its value, and a tail only with the other block dims whole."""
    return stratum.admits(dims[stratum.quantity], dims) and _alone(stratum, dims, whole)


def _unmet_tail_sides(strata: list[Stratum], whole: Mapping[str, Stratum], plans: list[_Plan]) -> list[tuple[Stratum, Stratum]]:
    """(a dim's tail, another dim's whole blocks on one side of its boundary) that no planned case holds together
    with every other block dim whole. A cut in the row tail switched on only above a size shows only where the
    columns are whole *and* long: the whole class drawn at random is long only by chance."""
    tails = [s for s in strata if s.is_tail and not s.region]
    sides = [s for s in strata if s.is_whole and s.region]
    return [
        (tail, side)
        for tail in tails
        for side in sides
        if side.quantity != tail.quantity and not any(_meets(tail, side, p.dims, whole) for p in plans if p.holds_dim_strata)
    ]


def _meets(tail: Stratum, side: Stratum, dims: Mapping[str, int], whole: Mapping[str, Stratum]) -> bool:
    """Whether these dims hold the tail with the side's whole blocks, every third block dim whole."""
    return tail.admits(dims[tail.quantity], dims) and _alone(tail, dims, {**whole, side.quantity: side})


def _tail_alone(chosen: dict[str, Stratum], whole: Mapping[str, Stratum]) -> dict[str, Stratum]:
    """The case's strata with its first tail (a dim off a block multiple) alone: every other dim with a declared
    block size takes a whole number of blocks. A bug in one dim's tail (rows past the last whole row block never
    written) shows only where no other dim's mask covers it, so no tail may always come with another."""
    tail = next((s for s in chosen.values() if s.is_tail), None)
    if tail is None:
        return chosen
    return {**chosen, **{dim: s for dim, s in whole.items() if dim != tail.quantity}}


def _alone(stratum: Stratum, dims: Mapping[str, int], whole: Mapping[str, Stratum]) -> bool:
    """Whether a dim's value covers its stratum here: a tail only where every other block dim is whole."""
    others = (s for dim, s in whole.items() if dim != stratum.quantity)
    return not stratum.is_tail or all(s.admits(dims[s.quantity], dims) for s in others)


def _input_strata_cases(contract: Contract, profile: ProfileName, pending: list[Stratum], rng: random.Random) -> list[_Plan]:
    """New cases whose entries hold the input strata the dim strata cases could not."""
    added: list[_Plan] = []
    while pending:
        first, holds = pending[0], _holds(contract, pending, rng)
        # Room for every pending stratum if the ranges have it, else for the first one.
        dims = _room_for(contract, profile, rng, holds, cheap=True, tries=_DIM_TRIES)
        if not holds(dims):
            dims = _room_for(contract, profile, rng, lambda dims, first=first: first.draw(rng, dims) is not None, cheap=True)
        plan = _Plan(dims)
        before = len(pending)
        pending = _host(contract, plan, pending, rng)
        if len(pending) == before:  # never expected: contract validation found the stratum drawable
            raise ValueError(f"stratum {first.name} cannot be drawn in the {profile} profile's fresh ranges")
        added.append(plan)
    return added


@dataclass
class _InputStrata:
    """The input strata not yet held by a planned case."""

    contract: Contract
    pending: list[Stratum]
    rng: random.Random

    def room(self, dims: dict[str, int]) -> int:
        """How many pending input strata a case of these dims can hold (entries and values)."""
        total = 0
        for name in {s.quantity for s in self.pending}:
            drawable = sum(s.quantity == name and s.draw(self.rng, dims) is not None for s in self.pending)
            total += min(drawable, _entries(self.contract, name, dims))
        return total


def _entries(contract: Contract, name: str, dims: dict[str, int]) -> int:
    spec = next(i for i in contract.inputs if i.name == name)
    size = 1
    for n in evaluate_shape(list(spec.shape), dims):
        size *= n
    return size


def _holds(contract: Contract, pending: list[Stratum], rng: random.Random) -> Callable[[dict[str, int]], bool]:
    """Whether a case of these dims has an entry for, and a value of, every pending stratum."""

    def holds(dims: dict[str, int]) -> bool:
        for name in {s.quantity for s in pending}:
            if _entries(contract, name, dims) < sum(s.quantity == name for s in pending):
                return False
        return all(s.draw(rng, dims) is not None for s in pending)

    return holds


def _host(contract: Contract, plan: _Plan, pending: list[Stratum], rng: random.Random) -> list[Stratum]:
    """Free entries of the plan's inputs set to values of pending strata; the strata still pending."""
    for stratum in list(pending):
        if stratum not in pending:
            continue
        taken = plan.entries.setdefault(stratum.quantity, {})
        free = [i for i in range(_entries(contract, stratum.quantity, plan.dims)) if i not in taken]
        value = stratum.draw(rng, plan.dims) if free else None
        if value is None:
            continue
        taken[rng.choice(free)] = value
        covered = [s for s in pending if s.quantity == stratum.quantity and s.admits(value, plan.dims)]
        plan.strata += [s.name for s in covered]
        pending = [s for s in pending if s not in covered]
    return pending


def _edge_cases(contract: Contract, profile: ProfileName, plans: list[_Plan], rng: random.Random) -> list[_Plan]:
    """The edits of the profile's edge cases on fresh dims: edge cases editing different inputs (or making the
    same edits) share a case, carried by a planned case whose own values they leave as they are where one fits, else by a case of
    their own (dims in the lower half of the ranges when they fit there)."""
    groups: list[list[Case]] = []
    for case in contract.cases_for(profile):
        if case.kind != "edge" or not case.edits:
            continue
        inputs = {e.input for e in case.edits}
        # A group that already makes these very edits, else one that edits none of these inputs.
        group = next((g for g in groups if all(e in _edits_of(g) for e in case.edits)), None) or next(
            (g for g in groups if not inputs & {e.input for e in _edits_of(g)}), None
        )
        if group is None:
            groups.append([case])
        else:
            group.append(case)
    added = []
    for group in groups:
        edits = _edits_of(group)
        what = "edits of edge cases " + ", ".join(c.name for c in group)
        hosts = (p for p in plans if not p.holds_dim_strata)
        host = next((p for p in hosts if _carries(p, edits) and edits_fit(contract, edits, p.dims)), None)
        if host is not None:  # a case whose own values the edits leave as they are: one case fewer to run
            host.edits += edits
            host.carried.append(what)
            continue
        dims = _room_for(contract, profile, rng, lambda dims, edits=edits: edits_fit(contract, edits, dims), cheap=True)
        added.append(_Plan(dims, edits=edits, what=what))
    return added


def _edits_of(group: list[Case]) -> list[Edit]:
    """The group's edits, each once (two edge cases may make the same edit: a full cache, say)."""
    edits: list[Edit] = []
    for edit in (e for c in group for e in c.edits):
        if edit not in edits:
            edits.append(edit)
    return edits


def _carries(plan: _Plan, edits: list[Edit]) -> bool:
    """Whether the plan can carry these edits unchanged in meaning: it edits none of their inputs, and every
    entry it sets for a strata value of one is the value an edit sets the whole input to (an empty cache's
    edit, cache_lens = 0, on a case whose one request has cache length 0)."""
    for name in {e.input for e in edits}:
        if any(e.input == name for e in plan.edits):
            return False
        entries = plan.entries.get(name)
        if not entries:
            continue
        mine = [e for e in edits if e.input == name]
        values = {evaluate(e.value, plan.dims) if e.set == "value" and not e.at and e.value is not None else None for e in mine}
        if values != set(entries.values()) or None in values:
            return False
    return True


def _room_for(
    contract: Contract,
    profile: ProfileName,
    rng: random.Random,
    fits: Callable[[dict[str, int]], bool],
    cheap: bool = False,
    tries: int | None = None,
) -> dict[str, int]:
    """Dims uniform in the fresh ranges that `fits` (`cheap`: then each dim moved into the lower half of its
    range where it still fits); the top of the ranges, then the largest dims the boundaries allow, when no
    draw fits."""
    ranges = _ranges(contract, profile)
    for _ in range(_DIM_TRIES):
        dims = {d: rng.randint(low, high) for d, (low, high) in ranges.items()}
        if fits(dims):
            for dim, (low, high) in ranges.items() if cheap else ():
                smaller = {**dims, dim: rng.randint(low, _half(low, high))}
                dims = smaller if fits(smaller) else dims
            return dims
    top = {d: high for d, (_, high) in ranges.items()}
    if tries is not None:  # the caller has a fallback: no top or largest dims
        return top
    return top if fits(top) else largest_dims(contract.strata_scope(), profile)


def _half(low: int, high: int) -> int:
    """The top of the lower half of [low, high]."""
    return low + (high - low) // 2


def _ranges(contract: Contract, profile: ProfileName) -> dict[str, tuple[int, int]]:
    fresh = contract.cases.fresh
    return dict(getattr(fresh, profile)) if fresh is not None else {}


def _entry_edit(contract: Contract, name: str, index: int, value: int, dims: dict[str, int]) -> Edit:
    spec = next(i for i in contract.inputs if i.name == name)
    shape = evaluate_shape(list(spec.shape), dims)
    position = []
    for size in reversed(shape):
        position.append(index % size)
        index //= size
    return Edit(input=name, set="value", value=value, at=[list(reversed(position))])


def draw_fresh_cases(task: Task, profile: ProfileName, device: str) -> list[FreshVariant]:
    """The check's fresh cases, each drawn with an OS-random seed and its golden stages computed by the reference.
    The cases are drawn at once, in threads (torch's draws and the reference let go of the GIL): one after another
    they were 2-4 s of a warm MLA check on the H200. Their order is the plan's."""
    contract = task.contract
    planned = plan_fresh_cases(contract, profile, secrets.SystemRandom())
    with ThreadPoolExecutor(max_workers=_DRAW_WORKERS, thread_name_prefix="ferret-fresh") as pool:
        return list(pool.map(lambda item: _fresh_variant(task, item[0], item[1], device), planned))


def _fresh_variant(task: Task, planned: Case, strata: tuple[str, ...], device: str) -> FreshVariant:
    contract = task.contract
    golden_dtype = torch.float32 if contract.reference.golden_dtype == "float32" else torch.float64
    seed = secrets.randbits(62)
    case = planned.model_copy(update={"seed": seed})
    inputs = draw_inputs(contract, case, contract.primary_dtype)
    with torch.no_grad():
        stages = task.reference({k: v.to(device) for k, v in inputs.items()}, dict(contract.params))
    golden = {name: stages[name].detach().to("cpu", golden_dtype) for name in contract.golden_names()}
    return FreshVariant(f"{case.name}@{contract.primary_dtype}", case, contract.primary_dtype, seed, inputs, golden, strata)
