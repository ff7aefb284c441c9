"""Loading contracts: the real ones load; a bad one is refused with the file, the field and the line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, line_after, line_of, write_contract  # noqa: E402

from ferret.contract.load import ContractError, load_contract  # noqa: E402
from ferret.contract.model import Contract  # noqa: E402


def _contracts_with_tolerances() -> list[Path]:
    found = []
    for path in sorted(CONTRACTS.glob("*.yaml")):
        if path.name.endswith(".tolerances.yaml"):
            continue
        data = yaml.safe_load(path.read_text())
        tolerances = data.get("tolerances") if isinstance(data, dict) else None
        if isinstance(tolerances, dict) or (isinstance(tolerances, str) and (path.parent / tolerances).is_file()):
            found.append(path)
    return found


REAL_CONTRACTS = _contracts_with_tolerances()


def test_rmsnorm_is_among_the_real_contracts():
    assert CONTRACTS / "rmsnorm.yaml" in REAL_CONTRACTS


@pytest.mark.parametrize("path", REAL_CONTRACTS, ids=lambda p: p.name)
def test_real_contract_loads(path):
    contract = load_contract(path)
    assert isinstance(contract, Contract)
    assert contract.op == path.stem, "contracts/<op>.yaml is named after its op"
    assert contract.tolerances is not None
    stage_names = [s.name for s in contract.stages]
    for dtype in contract.dtypes:
        for stage in stage_names:
            assert contract.tolerance(dtype, stage) is not None
    assert contract.cases_for("cpu"), "a contract needs CPU cases for the interpreter profile"
    assert set(o.name for o in contract.outputs) <= set(stage_names)


def test_rmsnorm_contract_content():
    contract = load_contract(CONTRACTS / "rmsnorm.yaml")
    assert contract.op == "rmsnorm"
    assert [s.name for s in contract.stages] == ["inv_rms", "y"]
    assert contract.primary_dtype == "bfloat16"
    assert contract.params == {"eps": 1.0e-6}
    assert contract.tolerance("float32", "y").rel_l2 is not None


def test_contract_without_tolerances_file_is_allowed_for_calibrate(tmp_path):
    path = write_contract(tmp_path, with_tolerances=False)
    contract = load_contract(path, require_tolerances=False)
    assert contract.tolerances is None
    with pytest.raises(ValueError, match="calibrate"):
        contract.tolerance("float32", "y")


def _error(path: Path) -> str:
    with pytest.raises(ContractError) as info:
        load_contract(path)
    return str(info.value)


@pytest.mark.quick
def test_unknown_key_names_file_field_and_line(tmp_path):
    path = write_contract(tmp_path, lambda d: d["budgets"].update(candidate_timout_s=3))
    message = _error(path)
    assert f"{path}:{line_of(path, 'candidate_timout_s:')}: budgets.candidate_timout_s:" in message
    assert "Extra inputs are not permitted" in message


def test_unknown_top_level_key(tmp_path):
    path = write_contract(tmp_path, lambda d: d.update(descripton="typo"))
    message = _error(path)
    assert f"{path}:{line_of(path, 'descripton:')}: descripton:" in message


def test_missing_required_field_names_its_parent_line(tmp_path):
    path = write_contract(tmp_path, lambda d: d["target"].pop("scope"))
    message = _error(path)
    # The field is absent: the error points into the block of its parent, between `target:` and the next section.
    reported = [
        int(line.split(": target.scope")[0].rsplit(":", 1)[1])
        for line in message.splitlines()
        if ": target.scope: Field required" in line
    ]
    assert len(reported) == 1, message
    assert str(path) in message
    assert line_of(path, "target:") <= reported[0] < line_after(path, "target:", "baseline:")


def test_missing_top_level_section(tmp_path):
    path = write_contract(tmp_path, lambda d: d.pop("speed"))
    message = _error(path)
    assert str(path) in message
    assert "speed: Field required" in message


def test_wrong_type_names_value(tmp_path):
    path = write_contract(tmp_path, lambda d: d["budgets"].update(case_timeout_s="soon"))
    message = _error(path)
    assert f"{path}:{line_of(path, 'case_timeout_s: soon')}: budgets.case_timeout_s:" in message
    assert "'soon'" in message


def test_the_old_timeout_key_says_what_replaced_it(tmp_path):
    path = write_contract(tmp_path, lambda d: d["budgets"].update(candidate_timeout_s=600))
    message = _error(path)
    assert f"{path}:" in message and ": budgets: " in message
    assert "candidate_timeout_s was replaced by case_timeout_s" in message and "check_timeout_s" in message


def test_a_case_timeout_longer_than_the_check_deadline_is_refused(tmp_path):
    path = write_contract(tmp_path, lambda d: d["budgets"].update(case_timeout_s=600, check_timeout_s=300))
    assert "case_timeout_s (600) is longer than check_timeout_s (300)" in _error(path)


def test_wrong_type_inside_a_list(tmp_path):
    def mutate(d):
        d["cases"]["cpu"][1]["seed"] = "two"

    path = write_contract(tmp_path, mutate)
    message = _error(path)
    assert f"{path}:{line_of(path, 'seed: two')}: cases.cpu.1.seed:" in message


def test_stage_tolerance_missing_for_a_dtype(tmp_path):
    path = write_contract(tmp_path, mutate_tolerances=lambda t: t["by_dtype"]["float16"].pop("y"))
    message = _error(path)
    assert str(path) in message
    assert "tolerances.by_dtype.float16: no tolerance for stages ['y']" in message


def test_tolerance_for_an_unknown_dtype(tmp_path):
    def mutate(t):
        t["by_dtype"]["float64"] = t["by_dtype"]["float32"]

    path = write_contract(tmp_path, mutate_tolerances=mutate)
    message = _error(path)
    assert "tolerances.by_dtype.float64: not one of dtypes" in message


def test_error_inside_the_tolerance_file_names_that_file_and_line(tmp_path):
    def mutate(t):
        t["by_dtype"]["float16"]["y"]["rel_l3"] = 0.1

    path = write_contract(tmp_path, mutate_tolerances=mutate)
    tol_path = path.parent / "rmsnorm.tolerances.yaml"
    message = _error(path)
    assert f"{tol_path}:{line_of(tol_path, 'rel_l3:')}: tolerances.by_dtype.float16.y.rel_l3:" in message


def test_tolerance_needs_a_bound(tmp_path):
    def mutate(t):
        t["by_dtype"]["float16"]["y"] = {}

    path = write_contract(tmp_path, mutate_tolerances=mutate)
    message = _error(path)
    assert "tolerances.by_dtype.float16.y" in message
    assert "at least one of rel_l2, max_abs_rel_peak, cosine_min" in message


def test_output_that_is_not_a_stage(tmp_path):
    path = write_contract(tmp_path, lambda d: d["outputs"][0].update(name="z"))
    message = _error(path)
    assert str(path) in message
    assert "outputs.z: every output must also be a stage" in message


def test_unknown_dim_in_a_shape_expression(tmp_path):
    path = write_contract(tmp_path, lambda d: d["stages"][1].update(shape=["M", "K * 2"]))
    message = _error(path)
    assert str(path) in message
    assert "stages.y:" in message
    assert "unknown dim 'K'" in message


def test_unknown_dim_in_an_input_shape(tmp_path):
    path = write_contract(tmp_path, lambda d: d["inputs"][1].update(shape=["H"]))
    message = _error(path)
    assert "inputs.weight:" in message and "unknown dim 'H'" in message


def test_code_in_a_shape_expression_is_refused(tmp_path):
    path = write_contract(tmp_path, lambda d: d["stages"][0].update(shape=["__import__('os').getpid()"]))
    message = _error(path)
    assert "stages.inv_rms:" in message and "unsupported syntax" in message


def test_dims_and_shape_lengths_must_agree(tmp_path):
    path = write_contract(tmp_path, lambda d: d["stages"][1].update(dims=["row"]))
    message = _error(path)
    assert f"{path}:{line_after(path, 'stages:', '- name: y')}: stages.1:" in message
    assert "dims has 1 names but shape has 2 axes" in message


@pytest.mark.parametrize(
    "section, bad",
    [("reference", "tasks.rmsnorm.reference.reference"), ("baseline", "tasks/rmsnorm/baseline.py:run")],
)
def test_bad_import_path_pattern(tmp_path, section, bad):
    path = write_contract(tmp_path, lambda d: d[section].update(entry=bad))
    message = _error(path)
    assert f"{path}:{line_of(path, f'entry: {bad}')}: {section}.entry: String should match pattern" in message


def test_edit_of_an_unknown_input(tmp_path):
    def mutate(d):
        d["cases"]["cpu"][4]["edits"][0]["input"] = "w"

    path = write_contract(tmp_path, mutate)
    message = _error(path)
    assert "cases.cpu.zero_rows.edits: no input named 'w'" in message


def test_duplicate_case_names(tmp_path):
    def mutate(d):
        d["cases"]["cpu"][1]["name"] = "typical"

    path = write_contract(tmp_path, mutate)
    assert "cases.cpu: duplicate case names ['typical']" in _error(path)


def test_speed_case_must_be_a_gpu_case(tmp_path):
    path = write_contract(tmp_path, lambda d: d["speed"].update(cases=["typical"]))
    assert "speed.cases: not GPU cases ['typical']" in _error(path)


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("schema_version: 1\nop: rmsnorm\ntarget: {op: rmsnorm, scope: [unclosed\nbaseline: x\n")
    message = _error(path)
    assert str(path) in message
    assert "not valid YAML" in message
    assert "line " in message


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- op: rmsnorm\n")
    message = _error(path)
    assert str(path) in message and "mapping" in message


def test_missing_contract_file(tmp_path):
    path = tmp_path / "nope.yaml"
    message = _error(path)
    assert str(path) in message and "cannot read" in message


def test_missing_tolerances_file(tmp_path):
    path = write_contract(tmp_path, with_tolerances=False)
    message = _error(path)
    assert str(path) in message
    assert str(path.parent / "rmsnorm.tolerances.yaml") in message
    assert "does not exist" in message and "ferret calibrate" in message


def test_inline_tolerances_are_accepted(tmp_path):
    from ferret_testkit import rmsnorm_tolerance_data

    path = write_contract(tmp_path, lambda d: d.update(tolerances=rmsnorm_tolerance_data()), with_tolerances=False)
    contract = load_contract(path)
    assert contract.tolerance("bfloat16", "y").rel_l2 == rmsnorm_tolerance_data()["by_dtype"]["bfloat16"]["y"]["rel_l2"]


def test_every_error_is_reported_at_once(tmp_path):
    def mutate(d):
        d["budgets"]["candidate_timout_s"] = 3
        d["reference"]["entry"] = "nocolon"

    message = _error(write_contract(tmp_path, mutate))
    assert "budgets.candidate_timout_s" in message and "reference.entry" in message


def test_opposing_halves_needs_an_axis_the_input_has(tmp_path):
    def no_axis(d):
        d["cases"]["cpu"][4]["edits"] = [{"input": "x", "set": "opposing_halves"}]

    assert "`axis` is required by set: opposing_halves" in _error(write_contract(tmp_path, no_axis))

    def axis_on_rows(d):
        d["cases"]["cpu"][4]["edits"][0]["axis"] = 0

    assert "allowed with no other edit" in _error(write_contract(tmp_path, axis_on_rows))

    def axis_out_of_range(d):
        d["cases"]["cpu"][4]["edits"] = [{"input": "x", "set": "opposing_halves", "axis": 2}]

    assert "cases.cpu.zero_rows.edits: axis 2 of 'x', which has 2 axes" in _error(write_contract(tmp_path, axis_out_of_range))
