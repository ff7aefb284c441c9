"""Every point of a template space as one compact table: the offline optimizer's search over millions of points.

A point is a dict of parameter -> value with an approach name (`TemplateSpace.approach`). The MLA space has 2.8M
distinct points; as dicts keyed by their names they took 2.8 GB of memory and about 36 s to list and rank on a CI core
(2026-12-06), on every dispatch. Here a point is one row of an integer array: each parameter's value as its place in
the parameter's list, `NOT_APPLYING` (-1) where the parameter does not apply. Dicts and names are made only for the
rows asked for.

A name is found without listing every name: each row's name has a 64-bit polynomial hash, worked out column by
column from each label's hash (the hash of a joined name follows from the hashes and lengths of its parts), and a row
whose hash matches is confirmed by its name. Two distinct points named alike are found the same way: equal hashes
first, then their names compared.

The rows come in the order the space lists its points: the parameters' product, the first parameter varying slowest,
a conditional parameter cut to its first value where the parameters before it already say it cannot apply, then each
point canonical (non-applying parameters at -1) and kept at its first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

import numpy as np

Point = dict[str, Any]


class Space(Protocol):
    """What the table reads of a space (ferret.roles.offline.TemplateSpace)."""

    parameters: dict[str, list[Any]]
    applies_when: dict[str, dict[str, list[Any]]]

    def label_text(self, name: str, value: Any) -> str: ...


NOT_APPLYING = -1
SEPARATOR = ","  # between the labels of a name (TemplateSpace.approach)
_HASH_BASE = 0x100000001B3  # odd, so multiplying by it loses nothing mod 2**64
_MASK = 2**64 - 1

# (position of the parameter a condition reads, the places of the values under which it applies)
Condition = tuple[int, np.ndarray]


def text_hash(text: str) -> int:
    """The polynomial hash of a text's UTF-8 bytes mod 2**64: hash(a + b) = hash(a) * base**len(b) + hash(b)."""
    value = 0
    for byte in text.encode():
        value = (value * _HASH_BASE + byte) & _MASK
    return value


def _hash_power(text: str) -> int:
    """base ** (the text's length in bytes) mod 2**64: what the hash of a text before it is multiplied by."""
    return pow(_HASH_BASE, len(text.encode()), 2**64)


class PointTable(Sequence[Point]):
    """The distinct points of `space`, in its order, as `places` [points, parameters]: int8 where every parameter has
    at most 127 values (the MLA space's 2.8M points in 55 MB), else int16."""

    def __init__(self, space: Space):
        self.names = list(space.parameters)
        self.values = [space.parameters[name] for name in self.names]
        # each value's label; the last entry (place -1) is a parameter that does not apply: no label
        self.labels = [
            [space.label_text(name, v) for v in values] + [""] for name, values in zip(self.names, self.values, strict=True)
        ]
        conditions = _conditions(space)
        self.places = _distinct_in_order(_canonical(_pruned_product([len(v) for v in self.values], conditions), conditions))
        self._hashes = _name_hashes(self.places, self.labels)
        self._refuse_shared_names()

    # ------------------------------------------------------------------------------------------ rows
    def __len__(self) -> int:
        return len(self.places)

    @overload
    def __getitem__(self, index: int) -> Point: ...
    @overload
    def __getitem__(self, index: slice) -> list[Point]: ...
    def __getitem__(self, index: int | slice) -> Point | list[Point]:
        if isinstance(index, slice):
            return [self.point(i) for i in range(len(self))[index]]
        return self.point(index)

    def point(self, row: int) -> Point:
        """Row `row` as a point: parameter -> value, None where it does not apply."""
        places = self.places[row]
        return {
            name: (None if place == NOT_APPLYING else values[place])
            for name, values, place in zip(self.names, self.values, places.tolist(), strict=True)
        }

    def approach(self, row: int) -> str:
        """Row `row`'s approach name: its labels joined, in parameter order (`TemplateSpace.approach`)."""
        texts = (labels[place] for labels, place in zip(self.labels, self.places[row].tolist(), strict=True))
        return SEPARATOR.join(text for text in texts if text)

    def row_named(self, approach: str) -> int | None:
        """The row of the point named `approach`, or None where no point has that name."""
        for row in np.flatnonzero(self._hashes == np.uint64(text_hash(approach))).tolist():
            if self.approach(row) == approach:
                return row
        return None

    def column(self, name: str) -> np.ndarray:
        """[points] each point's place for parameter `name` (-1 where it does not apply)."""
        return self.places[:, self.names.index(name)]

    @property
    def by_approach(self) -> Mapping[str, Point]:
        """The points by approach name, each made when asked for."""
        return _ByApproach(self)

    # ------------------------------------------------------------------------------------------ names
    def _refuse_shared_names(self) -> None:
        """A ValueError where two distinct points have one name (labels that hide a difference): the names of each
        run of rows with one hash are compared (a run may also hold names that only share the hash)."""
        order = np.argsort(self._hashes, kind="stable")
        ordered = self._hashes[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        shared = ends - starts > 1
        for start, end in zip(starts[shared].tolist(), ends[shared].tolist(), strict=True):
            seen: set[str] = set()
            for row in order[start:end].tolist():
                name = self.approach(row)
                if name in seen:
                    raise ValueError(f"two points share the approach name {name!r}; fix labels")
                seen.add(name)


class _ByApproach(Mapping[str, Point]):
    """A PointTable read by approach name."""

    def __init__(self, table: PointTable):
        self._table = table

    def __getitem__(self, approach: str) -> Point:
        row = self._table.row_named(approach)
        if row is None:
            raise KeyError(approach)
        return self._table.point(row)

    def __contains__(self, approach: object) -> bool:
        return isinstance(approach, str) and self._table.row_named(approach) is not None

    def __iter__(self) -> Iterator[str]:
        return (self._table.approach(row) for row in range(len(self._table)))

    def __len__(self) -> int:
        return len(self._table)


def _conditions(space: Space) -> list[list[Condition]]:
    """Each parameter's `applies_when` as (position read, places allowed), in parameter order (an allowed value the
    parameter read does not list allows nothing)."""
    names = list(space.parameters)
    return [
        [
            (
                names.index(other),
                np.array([space.parameters[other].index(v) for v in allowed if v in space.parameters[other]], np.int16),
            )
            for other, allowed in space.applies_when.get(name, {}).items()
        ]
        for name in names
    ]


def _applies(rows: np.ndarray, conditions: list[Condition]) -> np.ndarray:
    """[rows] whether a parameter with these conditions applies at each row."""
    applies = np.ones(len(rows), bool)
    for position, allowed in conditions:
        applies &= np.isin(rows[:, position], allowed)
    return applies


def _pruned_product(lengths: list[int], conditions: list[list[Condition]]) -> np.ndarray:
    """[raw points, parameters] places of the parameters' product, first parameter slowest. A parameter whose
    conditions read only parameters before it takes its first value alone where they say it does not apply (its
    other values would be the same canonical point); one that reads a later parameter takes every value, and the
    duplicates go when the rows are made canonical."""
    dtype = np.int8 if max(lengths, default=0) <= np.iinfo(np.int8).max else np.int16
    rows = np.zeros((1, 0), dtype)
    for i, length in enumerate(lengths):
        reads_later = any(position > i for position, _ in conditions[i])
        counts = (
            np.full(len(rows), length) if not conditions[i] or reads_later else np.where(_applies(rows, conditions[i]), length, 1)
        )
        starts = np.cumsum(counts) - counts
        column = np.arange(int(counts.sum())) - np.repeat(starts, counts)
        rows = np.column_stack((np.repeat(rows, counts, axis=0), column.astype(dtype)))
    return rows


def _canonical(rows: np.ndarray, conditions: list[list[Condition]]) -> np.ndarray:
    """The rows with every parameter that does not apply at -1 (`TemplateSpace.canonical`). Conditions read only
    parameters that apply everywhere (the space's validator), so the order of the parameters does not matter."""
    for i, when in enumerate(conditions):
        if when:
            rows[~_applies(rows, when), i] = NOT_APPLYING
    return rows


def _distinct_in_order(rows: np.ndarray) -> np.ndarray:
    """The distinct rows, each at its first occurrence, in order."""
    as_bytes = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first = np.unique(as_bytes, return_index=True)
    return rows[np.sort(first)]


def _name_hashes(places: np.ndarray, labels: list[list[str]]) -> np.ndarray:
    """[points] `text_hash` of each row's approach name, from its labels' hashes column by column: a label joins the
    name so far as name * base**(1 + len(label)) + hash(",") * base**len(label) + hash(label); an empty one is left
    out. uint64 arithmetic wraps, which is the hash's mod 2**64."""
    base, comma = np.uint64(_HASH_BASE), np.uint64(text_hash(SEPARATOR))
    hashes = np.zeros(len(places), np.uint64)
    started = np.zeros(len(places), bool)
    for position, texts in enumerate(labels):
        column = places[:, position]  # -1 indexes the last entry: no label
        label = np.array([text_hash(t) for t in texts], np.uint64)[column]
        power = np.array([_hash_power(t) for t in texts], np.uint64)[column]
        present = np.array([bool(t) for t in texts])[column]
        joined = (hashes * base + comma) * power + label
        hashes = np.where(present, np.where(started, joined, label), hashes)
        started |= present
    return hashes
