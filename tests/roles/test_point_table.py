"""The compact table of a template space's points: rows of value places, names found by hash and confirmed.

tests/roles/test_offline.py checks that the table lists the same points, names and order as canonicalizing and
naming the whole product one point at a time; here, what the table adds: finding a point by name without listing
every name, and the integer type of its rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from ferret.roles import point_table
from ferret.roles.offline import TemplateSpace
from ferret.roles.point_table import NOT_APPLYING, PointTable, text_hash


def _space(**changes) -> TemplateSpace:
    """A toy space with an empty label, a label with a comma and non-ASCII text, and conditions before and after."""
    data = {
        "op": "toy",
        "template": "t.j2",
        "pivot": "policy",
        "invariants": "toy",
        "parameters": {"policy": ["a", "b"], "late": [0, 1], "tiles": [1, 2, 4], "gate": [8, 9], "width": [16, 32]},
        "applies_when": {"tiles": {"policy": ["b"]}, "late": {"gate": [9]}, "width": {"policy": ["b"], "gate": [8]}},
        "default": {"policy": "a", "late": 0, "tiles": 1, "gate": 8, "width": 16},
        "labels": {"policy": {"a": "", "b": "plan-b"}, "tiles": "tiles={}×", "width": "w={},wide"},
    }
    return TemplateSpace.model_validate({**data, **changes})


def test_every_point_is_found_by_its_name_and_no_other_name_finds_one():
    space = _space()
    table = space.point_table()
    assert len(table) == 15
    for row in range(len(table)):
        name = space.approach(table[row])
        assert table.approach(row) == name and table.row_named(name) == row
        assert table.by_approach[name] == table[row] and name in table.by_approach
    for stranger in ["", "plan-b", "gate=8,plan-b", "gate=7", "plan-b,tiles=1×,gate=8,w=16,wide,x"]:
        assert table.row_named(stranger) is None and stranger not in table.by_approach
        with pytest.raises(KeyError):
            table.by_approach[stranger]
    assert list(table.by_approach) == [space.approach(p) for p in table]


def test_each_rows_name_hash_is_the_hash_of_its_name():
    """The column-by-column hash (empty labels left out, a comma between the others) is the name's own hash."""
    space = _space()
    table = space.point_table()
    assert [int(h) for h in table._hashes] == [text_hash(space.approach(p)) for p in table]


def test_names_that_share_a_hash_are_told_apart_by_the_names_themselves(monkeypatch):
    """With a base of 0 every name's hash is its last byte: nearly every row collides with another. The table still
    finds each point by its name and refuses no two distinct names."""
    monkeypatch.setattr(point_table, "_HASH_BASE", 0)
    space = _space()
    table = space.point_table()
    assert len(set(table._hashes.tolist())) < len(table) // 2
    assert all(table.row_named(space.approach(table[row])) == row for row in range(len(table)))


@pytest.mark.parametrize("hashing", ["polynomial", "base 0", "one hash for every name"])
def test_two_points_named_alike_are_refused_whatever_the_hash(monkeypatch, hashing):
    """Refused also where the two share their hash with other names between them (every name hashed alike: the
    rows of tiles=1 and tiles=4, named alike, have tiles=2's row between them)."""
    if hashing == "base 0":
        monkeypatch.setattr(point_table, "_HASH_BASE", 0)
    if hashing == "one hash for every name":
        monkeypatch.setattr(point_table, "_name_hashes", lambda places, labels: np.zeros(len(places), np.uint64))
    space = _space(labels={"tiles": {1: "t", 2: "two", 4: "t"}})
    with pytest.raises(ValueError, match="two points share the approach name 'policy=b,"):
        space.point_table()


def test_rows_are_int8_up_to_127_values_a_parameter_and_int16_beyond():
    small = _space()
    wide = _space(parameters={**small.parameters, "width": list(range(16, 216))})
    assert small.point_table().places.dtype == np.int8
    table = wide.point_table()
    assert table.places.dtype == np.int16 and len(table) == 3 + 3 * (200 + 2)
    assert table[len(table) - 1]["width"] is None and table.column("width").max() == 199
    assert table.row_named(wide.approach(table[len(table) - 2])) == len(table) - 2


def test_a_parameter_that_does_not_apply_is_not_applying_in_its_column():
    table = _space().point_table()
    policy, tiles = table.column("policy"), table.column("tiles")
    assert (tiles[policy == 0] == NOT_APPLYING).all() and (tiles[policy == 1] != NOT_APPLYING).all()
    assert all(table[row]["tiles"] is None for row in np.flatnonzero(policy == 0).tolist())


def test_slices_of_the_table_are_lists_of_points():
    table: PointTable = _space().point_table()
    assert table[::4] == [table[row] for row in range(0, len(table), 4)]
    assert table[-1] == table[len(table) - 1]
