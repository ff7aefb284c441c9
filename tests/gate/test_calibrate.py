"""`ferret calibrate` over an existing tolerance table (ferret/gate/calibrate.py): a new file is written; over
an existing one every changed bound is said (old -> new), a tighter or unchanged table is written, and one
that loosens any bound is refused, nothing written, unless forced. A small copy of the rmsnorm contract (one
case, float32, the baseline only) keeps each calibration well under a second."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import write_contract  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.model import Tolerance, ToleranceTable  # noqa: E402
from ferret.errors import UsageError  # noqa: E402
from ferret.gate.calibrate import LooserTolerances, ToleranceChange, calibrate, tolerance_changes  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _small(data: dict) -> None:
    data["dtypes"] = ["float32"]
    data["cases"]["cpu"] = data["cases"]["cpu"][:1]


@pytest.fixture
def contract(tmp_path) -> Path:
    return write_contract(tmp_path, _small, with_tolerances=False, link_tasks=True)


def _calibrate(contract: Path, **options) -> tuple[Path, list[str]]:
    said: list[str] = []
    path = calibrate(contract, seeds=1, check_seeds=1, progress=said.append, **options)
    return path, said


def _table(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _edit(path: Path, stage: str, **bounds: float) -> None:
    """Set bounds of float32/<stage> in the table file, as a table derived otherwise would hold them."""
    data = _table(path)
    data["by_dtype"]["float32"][stage].update(bounds)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_new_file_is_written_and_the_contract_loads_with_it(contract):
    path, said = _calibrate(contract)
    assert path == contract.parent / "rmsnorm.tolerances.yaml"
    assert said[-1] == f"{path}: a new tolerance table"
    assert load_contract(contract).tolerance("float32", "y").rel_l2 == _table(path)["by_dtype"]["float32"]["y"]["rel_l2"]


def test_an_unchanged_table_is_written_again_and_says_nothing_changed(contract):
    path, _ = _calibrate(contract)
    first = _table(path)["by_dtype"]
    _, said = _calibrate(contract)
    assert said[-1] == f"{path}: 0 bound(s) looser, 0 tighter, every other bound unchanged"
    assert _table(path)["by_dtype"] == first


def test_a_table_that_loosens_a_bound_is_refused_with_the_diff_and_nothing_is_written(contract):
    path, _ = _calibrate(contract)
    derived = _table(path)["by_dtype"]["float32"]["y"]
    _edit(path, "y", rel_l2=derived["rel_l2"] / 2, cosine_min=1.0)  # a tighter table in force
    before = path.read_text()
    with pytest.raises(LooserTolerances) as refused:
        _calibrate(contract)
    assert path.read_text() == before, "nothing written"
    message = str(refused.value)
    assert message.startswith(f"{path}: the new table loosens 2 bound(s) of the one in force; nothing written.")
    assert f"by_dtype.float32.y.rel_l2: {derived['rel_l2'] / 2} -> {derived['rel_l2']} (looser)" in message
    assert f"by_dtype.float32.y.cosine_min: 1.0 -> {derived['cosine_min']} (looser)" in message
    assert message.endswith("Re-run with --force to write it all the same.")


def test_force_writes_the_looser_table_and_says_which_bounds_it_loosened(contract):
    path, _ = _calibrate(contract)
    derived = _table(path)["by_dtype"]["float32"]["y"]
    _edit(path, "y", rel_l2=derived["rel_l2"] / 2)
    _, said = _calibrate(contract, force=True)
    assert _table(path)["by_dtype"]["float32"]["y"]["rel_l2"] == derived["rel_l2"]
    assert f"{path}: 1 bound(s) looser (--force), 0 tighter, every other bound unchanged" in said
    assert f"  by_dtype.float32.y.rel_l2: {derived['rel_l2'] / 2} -> {derived['rel_l2']} (looser)" in said
    assert "--force` on" in path.read_text().splitlines()[0]


def test_a_tighter_table_is_written_and_says_what_it_tightened(contract):
    path, _ = _calibrate(contract)
    derived = _table(path)["by_dtype"]["float32"]["inv_rms"]
    _edit(path, "inv_rms", max_abs_rel_peak=derived["max_abs_rel_peak"] * 3)  # a looser table in force
    _, said = _calibrate(contract)
    assert _table(path)["by_dtype"]["float32"]["inv_rms"]["max_abs_rel_peak"] == derived["max_abs_rel_peak"]
    assert f"{path}: 0 bound(s) looser, 1 tighter, every other bound unchanged" in said
    peak = derived["max_abs_rel_peak"]
    assert f"  by_dtype.float32.inv_rms.max_abs_rel_peak: {peak * 3} -> {peak} (tighter)" in said


def test_a_frozen_cases_own_row_stays_no_looser_than_the_new_general_row(contract):
    path, _ = _calibrate(contract)
    data = _table(path)
    general = data["by_dtype"]["float32"]["y"]
    row = dict(general, rel_l2=general["rel_l2"] / 2)
    data["by_case"] = {"typical": {"float32": {"y": row}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, said = _calibrate(contract)
    assert _table(path)["by_case"] == {"typical": {"float32": {"y": row}}}, "a row derived apart from calibrate stays"
    assert said[-1].endswith(": 0 bound(s) looser, 0 tighter, every other bound unchanged")
    # A table in force whose general cosine bound is looser than the new one, and the case row's between them:
    # the row keeps its own rel_l2 and takes the new general cosine bound (a case row may only tighten).
    data = _table(path)
    data["by_dtype"]["float32"]["y"]["cosine_min"] = general["cosine_min"] - 1e-3
    data["by_case"]["typical"]["float32"]["y"]["cosine_min"] = general["cosine_min"] - 1e-4
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, said = _calibrate(contract)
    assert _table(path)["by_case"] == {"typical": {"float32": {"y": row}}}
    assert said[-3] == f"{path}: 0 bound(s) looser, 2 tighter, every other bound unchanged"
    assert said[-2].startswith("  by_dtype.float32.y.cosine_min: ") and said[-2].endswith(" (tighter)")
    assert said[-1].startswith("  by_case.typical.float32.y.cosine_min: ") and said[-1].endswith(" (tighter)")
    load_contract(contract)  # the table written is valid: its case row no looser than the general one


def test_a_file_in_the_way_that_is_no_table_is_replaced_only_with_force(tmp_path):
    def inline(data: dict) -> None:  # tolerances inline: the file calibrate writes is not the contract's
        _small(data)
        rows = {"y": {"rel_l2": 0.1}, "inv_rms": {"rel_l2": 0.1}}
        data["tolerances"] = {"provenance": "by hand", "by_dtype": {"float32": rows}}

    contract = write_contract(tmp_path, inline, with_tolerances=False, link_tasks=True)
    in_the_way = contract.parent / "rmsnorm.tolerances.yaml"
    in_the_way.write_text("notes: not a table\n")
    with pytest.raises(UsageError, match="exists and is no tolerance table .*Re-run with --force to replace it"):
        _calibrate(contract)
    assert in_the_way.read_text() == "notes: not a table\n"
    _, said = _calibrate(contract, force=True)
    assert said[-1] == f"{in_the_way}: not a tolerance table; replaced (--force)"
    assert ToleranceTable.model_validate(_table(in_the_way)).by_dtype["float32"]["y"].rel_l2


def _tol(**bounds: float) -> Tolerance:
    return Tolerance(**{"rel_l2": 0.01, "max_abs_rel_peak": 0.02, "cosine_min": 0.999, **bounds})


def _changes(old: Tolerance, new: Tolerance | None) -> dict[str, bool]:
    tables = [ToleranceTable(provenance="t", by_dtype={"bfloat16": {"s": t}} if t else {}) for t in (old, new)]
    return {c.entry.rsplit(".", 1)[1]: c.looser for c in tolerance_changes(*tables)}


def test_which_way_each_bound_loosens():
    assert _changes(_tol(), _tol(rel_l2=0.02, max_abs_rel_peak=0.01)) == {"rel_l2": True, "max_abs_rel_peak": False}
    assert _changes(_tol(), _tol(cosine_min=0.99)) == {"cosine_min": True}
    assert _changes(_tol(), _tol(cosine_min=0.9999)) == {"cosine_min": False}
    # The scale and peak floors divide the error: a larger floor, or a floor where there was none, admits more.
    assert _changes(_tol(scale_floor=2.0), _tol(scale_floor=4.0, peak_floor=1.0)) == {"scale_floor": True, "peak_floor": True}
    assert _changes(_tol(scale_floor=2.0, peak_floor=4.0), _tol(scale_floor=1.0)) == {"scale_floor": False, "peak_floor": False}
    # A bound or a whole row that goes away admits everything.
    assert _changes(_tol(), Tolerance(rel_l2=0.01)) == {"max_abs_rel_peak": True, "cosine_min": True}
    assert _changes(_tol(), None) == {"rel_l2": True, "max_abs_rel_peak": True, "cosine_min": True}
    assert _changes(_tol(), _tol()) == {}
    # A frozen case's own row that the new table drops: the case gets the new general row.
    with_row = ToleranceTable(
        provenance="t", by_dtype={"bfloat16": {"s": _tol()}}, by_case={"c": {"bfloat16": {"s": _tol(rel_l2=0.001)}}}
    )
    without = ToleranceTable(provenance="t", by_dtype={"bfloat16": {"s": _tol()}})
    assert [(c.entry, c.old, c.new, c.looser) for c in tolerance_changes(with_row, without)] == [
        ("by_case.c.bfloat16.s.rel_l2", 0.001, 0.01, True)
    ]
    assert [c.looser for c in tolerance_changes(without, with_row)] == [False]
    assert ToleranceChange("by_dtype.bfloat16.s.rel_l2", 0.01, 0.02).line() == (
        "by_dtype.bfloat16.s.rel_l2: 0.01 -> 0.02 (looser)"
    )


def _ferret(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "ferret.cli.main", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_the_command_refuses_to_loosen_with_exit_2_and_writes_with_force(contract, tmp_path):
    args = ("calibrate", str(contract), "--seeds", "1", "--check-seeds", "1")
    made = _ferret(*args, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    path = Path(made.stdout.strip())
    derived = _table(path)["by_dtype"]["float32"]["y"]["rel_l2"]
    _edit(path, "y", rel_l2=derived / 2)
    before = path.read_text()
    refused = _ferret(*args, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"ferret: {path}: the new table loosens 1 bound(s)" in refused.stderr
    assert f"by_dtype.float32.y.rel_l2: {derived / 2} -> {derived} (looser)" in refused.stderr
    assert "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert path.read_text() == before
    forced = _ferret(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0 and forced.stdout.strip() == str(path)
    assert _table(path)["by_dtype"]["float32"]["y"]["rel_l2"] == derived
