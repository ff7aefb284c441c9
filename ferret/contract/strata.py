"""Strata of fresh cases, derived from the boundaries a contract declares (`cases.boundaries`).

A stratum is a set of values of one quantity (a case dim, or each entry of an integer input) where correct
kernels commonly take one branch: each side of a boundary (`at`), block multiples and the others
(`multiple_of`), the lowest value of every dim a boundary names (a dim is at least 1) and the two lowest
of every input a boundary names (past lengths 0 and 1). Every check's fresh cases hold a value of every
stratum of their profile, drawn at random within it (`ferret/gate/fresh.py`). Bounds are expressions over
the case dims (an input's range may depend on them: `cache_lens` in [0, L - 1]); a dim's are integers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ferret.contract.shapes import ShapeExpr, check_expression, evaluate

QuantityKind = Literal["dim", "input"]


class Boundary(BaseModel):
    """A value where correct kernels commonly branch, on one quantity: a case dim (`N`, a row's length) or the
    entries of an integer input (`cache_lens`, each request's length). Every check's fresh cases cover both
    sides of it (`at`: a value below and one at or above) or both classes (`multiple_of`: a value that is
    `remainder` modulo it and one that is not), with values drawn at random within each side."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z_][a-z0-9_]*$", description="Names the boundary in errors and in the strata of fresh cases.")
    dim: str | None = Field(default=None, description="A case dim the boundary is on (exactly one of dim and input).")
    input: str | None = Field(
        default=None,
        description="An input with a randint distribution whose entries the boundary is on (each entry "
        "is its own length or index, so one fresh case can hold several sides).",
    )
    at: ShapeExpr | None = Field(
        default=None,
        description="The lowest value of the upper side: sides are [lowest, at - 1] and [at, up_to]. An "
        "integer for a dim; for an input, an expression over the case dims (`L - 1`).",
    )
    multiple_of: int | None = Field(
        default=None,
        ge=2,
        description="A block size: the classes are values congruent to `remainder` modulo it "
        "(block multiples) and the others (exactly one of at and multiple_of).",
    )
    remainder: int = Field(
        default=0,
        ge=0,
        description="With multiple_of: the remainder of the multiples' class "
        "(`31` with multiple_of 32 on a past length makes the attended length a multiple).",
    )
    either_side: bool = Field(
        default=False,
        description="With multiple_of: instead of the others as one class, the values one below and one above a "
        "multiple, each a stratum of its own (a tile one short of full, a new element alone in a new tile), drawn "
        "behind at least one whole block where the range reaches that far. One "
        "below and one above a multiple of 128 are one either side of a multiple of 16, 32 and 64 too, so a "
        "multiple_of 128 covers every smaller power-of-two tile.",
    )
    up_to: int | None = Field(
        default=None,
        ge=1,
        description="A dim's only: its upper side (or both classes) reaches up to this value where "
        "the profile's fresh range stops below it, so that a cheap profile still crosses a boundary its uniform draws "
        "never reach (values are drawn up to the higher of this and the range's top). Such a stratum has a fresh case "
        "of its own, whose other dims are drawn in the lower half of their ranges.",
    )
    profiles: list[Literal["cpu", "gpu"]] = Field(
        default_factory=lambda: ["cpu", "gpu"], description="The profiles whose fresh cases cover the boundary."
    )
    description: str = Field(default="", description="Why kernels branch there.")

    @model_validator(mode="after")
    def _one_of_each(self) -> Boundary:
        if (self.dim is None) == (self.input is None):
            raise ValueError("a boundary names exactly one of dim and input")
        if (self.at is None) == (self.multiple_of is None):
            raise ValueError("a boundary has exactly one of at and multiple_of")
        if self.multiple_of is None and (self.remainder or self.either_side):
            raise ValueError("remainder and either_side need multiple_of")
        if self.multiple_of is not None and self.remainder >= self.multiple_of:
            raise ValueError(f"remainder {self.remainder} must be below multiple_of {self.multiple_of}")
        return self


@dataclass(frozen=True)
class Scope:
    """What strata are derived from (`Contract.strata_scope`): the boundaries, each profile's fresh ranges
    (dim -> [low, high]) and the bounds of every input with a randint distribution."""

    boundaries: tuple[Boundary, ...]
    ranges: Mapping[str, Mapping[str, tuple[int, int]]]
    randint: Mapping[str, tuple[ShapeExpr, ShapeExpr]]


@dataclass(frozen=True)
class Stratum:
    # `<boundary>:below`, `:above`, `:first` (exactly `at`), `:multiple`, `:other`, `:multiple-1`, `:multiple+1`,
    # `<q>:lowest`
    name: str
    kind: QuantityKind
    quantity: str  # the dim's or the input's name
    low: ShapeExpr  # inclusive bounds, over the case dims
    high: ShapeExpr
    modulus: int | None = None
    remainder: int = 0
    congruent: bool = True  # with a modulus: values == remainder (mod modulus), or the others
    # A neighbour of a multiple (`either_side`) drawn past the first block where the range reaches there: one short of
    # a block and one past it are tail cases only behind a whole block (N = 127 is a one-tile row, not a short tail).
    past_first_block: bool = False
    # The side of an `at` boundary on the same dim this block class is confined to (`one_block_row:above`): a path
    # past a boundary is judged with whole blocks and with each tail too, not only where a random draw falls.
    region: str = ""

    @property
    def side(self) -> str:
        """The part after the colon: `below`, `multiple`, `multiple+1`, `lowest`, ..."""
        return self.name.rsplit(":", 1)[1]

    @property
    def is_tail(self) -> bool:
        """Values off a block multiple (a masked tail), as opposed to a whole number of blocks."""
        return self.side in ("other", "multiple-1", "multiple+1")

    @property
    def is_whole(self) -> bool:
        return self.side == "multiple"

    def bounds(self, dims: Mapping[str, int]) -> tuple[int, int]:
        return evaluate(self.low, dict(dims)), evaluate(self.high, dict(dims))

    def admits(self, value: int, dims: Mapping[str, int]) -> bool:
        low, high = self.bounds(dims)
        if not low <= value <= high:
            return False
        if self.modulus is None:
            return True
        if (value % self.modulus == self.remainder) != self.congruent:
            return False
        # A neighbour in the first block is no tail behind a whole block (N = 1 is no column alone after 128
        # full ones) where the range reaches past it: it does not cover the stratum.
        return not (self.past_first_block and value < self.modulus and value + self.modulus <= high)

    def draw(self, rng: random.Random, dims: Mapping[str, int]) -> int | None:
        """A value of the stratum at these dims, uniform within it; None when it is empty there."""
        low, high = self.bounds(dims)
        if low > high:
            return None
        if self.modulus is None:
            return rng.randint(low, high)
        first = low + (self.remainder - low) % self.modulus
        if self.congruent:
            if self.past_first_block and first < self.modulus and first + self.modulus <= high:
                first += self.modulus
            return None if first > high else first + self.modulus * rng.randint(0, (high - first) // self.modulus)
        for _ in range(64):
            value = rng.randint(low, high)
            if value % self.modulus != self.remainder:
                return value
        others = [v for v in range(low, min(high, low + 2 * self.modulus) + 1) if v % self.modulus != self.remainder]
        return rng.choice(others) if others else None


def quantity_range(scope: Scope, boundary: Boundary, profile: str) -> tuple[ShapeExpr, ShapeExpr]:
    """The quantity's own range: the profile's fresh range of a dim, the randint bounds of an input."""
    if boundary.dim is not None:
        ranges = scope.ranges.get(profile, {})
        if boundary.dim not in ranges:
            raise ValueError(f"cases.fresh.{profile} has no range for dim {boundary.dim}")
        return ranges[boundary.dim]
    bounds = scope.randint.get(boundary.input or "")
    if bounds is None:
        raise ValueError(f"{boundary.input!r} is not an input with a randint distribution")
    return bounds


def _sides(boundary: Boundary, low: ShapeExpr, high: ShapeExpr, kind: QuantityKind) -> list[Stratum]:
    top = f"max({boundary.up_to}, {high})" if boundary.up_to is not None else high
    name, quantity = boundary.name, boundary.dim or boundary.input or ""
    if boundary.at is not None:
        at = boundary.at
        # The upper side at random, then exactly at the boundary (the first value past a block: one element alone
        # in a new block, which a draw from a wide side meets by luck only); where the random draw is `at`, one case.
        return [
            Stratum(f"{name}:below", kind, quantity, low, f"min(({at}) - 1, {high})"),
            Stratum(f"{name}:above", kind, quantity, at, top),
            Stratum(f"{name}:first", kind, quantity, at, f"min({at}, {top})"),
        ]
    modulus = boundary.multiple_of or 0
    multiple = Stratum(f"{name}:multiple", kind, quantity, low, top, modulus, boundary.remainder, True)
    if boundary.either_side:
        below, above = (boundary.remainder - 1) % modulus, (boundary.remainder + 1) % modulus
        return [
            multiple,
            Stratum(f"{name}:multiple-1", kind, quantity, low, top, modulus, below, True, past_first_block=True),
            Stratum(f"{name}:multiple+1", kind, quantity, low, top, modulus, above, True, past_first_block=True),
        ]
    return [multiple, Stratum(f"{name}:other", kind, quantity, low, top, modulus, boundary.remainder, False)]


def derive_strata(scope: Scope, profile: str) -> list[Stratum]:
    """Every stratum of the profile: the lowest values of each quantity a boundary names, then both sides (or
    classes) of each boundary, in declaration order."""
    lowest: dict[tuple[QuantityKind, str], list[Stratum]] = {}
    sides: list[Stratum] = []
    for boundary in scope.boundaries:
        if profile not in boundary.profiles:
            continue
        kind: QuantityKind = "dim" if boundary.dim is not None else "input"
        quantity = boundary.dim or boundary.input or ""
        low, high = quantity_range(scope, boundary, profile)
        # A dim is at least 1 (a length of 1); an input's entries also take their second value (past lengths 0 and 1)
        # where their range has one at the case's dims (a cache of capacity 1 has no past length 1).
        second = Stratum(f"{quantity}:second", kind, quantity, f"({low}) + 1", f"min(({low}) + 1, {high})")
        lowest.setdefault(
            (kind, quantity), [Stratum(f"{quantity}:lowest", kind, quantity, low, low)] + ([second] if kind == "input" else [])
        )
        sides += _sides(boundary, low, high, kind)
    return [s for pair in lowest.values() for s in pair] + _block_classes_per_region(sides) + sides


def _block_classes_per_region(sides: list[Stratum]) -> list[Stratum]:
    """Each block class of a dim (a whole number of blocks, one short, one past) within each side of the same dim's
    `at` boundaries, where that is not empty: a kernel's long-row path, say, is judged with whole blocks (no masked
    tail) as well as with a tail. Listed before the sides, whose own strata they then cover."""
    regions = [s for s in sides if s.kind == "dim" and s.side in ("below", "above")]
    classes = [s for s in sides if s.kind == "dim" and s.modulus is not None]
    confined = []
    for region in regions:
        for block in (c for c in classes if c.quantity == region.quantity):
            stratum = replace(block, name=f"{region.name}&{block.name}", low=region.low, high=region.high, region=region.name)
            value = stratum.draw(random.Random(0), {})
            # A neighbour of a multiple only within the first block is no tail behind a whole one: not a class here.
            if value is not None and not (block.past_first_block and value < (block.modulus or 0)):
                confined.append(stratum)
    return confined


def largest_dims(scope: Scope, profile: str) -> dict[str, int]:
    """The most room the profile's fresh cases can have: each dim at the top of its fresh range or of a
    boundary's upper side on it, whichever is higher."""
    dims = {dim: high for dim, (_, high) in scope.ranges.get(profile, {}).items()}
    for boundary in scope.boundaries:
        if boundary.dim is not None and profile in boundary.profiles and boundary.up_to is not None:
            dims[boundary.dim] = max(dims.get(boundary.dim, 0), evaluate(boundary.up_to, {}))
    return dims


def boundary_problems(scope: Scope, case_dims: Mapping[str, set[str]]) -> list[str]:
    """Each declared boundary checked against the contract: `cases.boundaries.<name>.<field>: problem`.
    `case_dims` holds the dims of each profile's cases."""
    problems: list[str] = []
    names = [b.name for b in scope.boundaries]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"cases.boundaries.{name}: duplicate boundary name")
    for boundary in scope.boundaries:
        where = f"cases.boundaries.{boundary.name}"
        known = set().union(*(case_dims.get(p, set()) for p in boundary.profiles))
        if boundary.dim is not None and boundary.dim not in known:
            problems.append(f"{where}.dim: {boundary.dim!r} is not a dim of the {'/'.join(boundary.profiles)} cases")
            continue
        if boundary.input is not None and boundary.up_to is not None:
            problems.append(
                f"{where}.up_to: only a dim's upper side may reach past its range (an input's values stay in its distribution's)"
            )
            continue
        for field in ("at", "up_to"):
            expr = getattr(boundary, field)
            try:
                if expr is not None:
                    check_expression(expr, set() if boundary.dim is not None else known)
            except ValueError as err:
                problems.append(f"{where}.{field}: {err}" + (" (a dim's boundary is an integer)" if boundary.dim else ""))
        if problems:
            continue
        for profile in boundary.profiles:
            try:
                low, high = quantity_range(scope, boundary, profile)
            except ValueError as err:
                problems.append(f"{where}.{'dim' if boundary.dim else 'input'}: {err}")
                break
            dims = largest_dims(scope, profile)
            for stratum in _sides(boundary, low, high, "dim" if boundary.dim else "input"):
                try:
                    empty = stratum.draw(random.Random(0), dims) is None
                except ValueError as err:
                    problems.append(f"{where}: {err}")
                    break
                if empty:
                    lo, hi = stratum.bounds(dims)
                    field = "at" if boundary.at is not None else "multiple_of"
                    problems.append(
                        f"{where}.{field}: side {stratum.name.split(':')[1]} is empty on the {profile} "
                        f"profile (values [{lo}, {hi}] at dims {dims}); widen cases.fresh.{profile} or "
                        "set up_to"
                    )
    return problems or _lowest_problems(scope)


def _lowest_problems(scope: Scope) -> list[str]:
    """Each profile's strata can all be drawn: its fresh ranges exist, and so do each quantity's lowest values."""
    problems = []
    for profile in ("cpu", "gpu"):
        named = [b for b in scope.boundaries if profile in b.profiles]
        if named and not scope.ranges.get(profile):
            problems.append(
                f"cases.boundaries.{named[0].name}.profiles: the {profile} profile draws no fresh cases "
                f"(cases.fresh.{profile} is empty)"
            )
            continue
        dims = largest_dims(scope, profile)
        for stratum in derive_strata(scope, profile):
            if stratum.draw(random.Random(0), dims) is None:
                boundary = next(b for b in named if stratum.quantity in (b.dim, b.input))
                problems.append(
                    f"cases.boundaries.{boundary.name}: stratum {stratum.name} is empty on the {profile} profile (at dims {dims})"
                )
    return problems
