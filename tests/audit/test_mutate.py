"""The mutation operators, each on a small module it applies to, and the conditional wrappers, run as Python."""

import ast
import types

import pytest
import torch

from ferret.audit.mutate import OPERATOR_NAMES, OPERATORS, conditional_source, conditions, make_mutants, operator, sites
from ferret.audit.run import select
from ferret.errors import UsageError

SOURCE = '''"""A docstring with 3 numbers 1.5 that no operator touches."""
from __future__ import annotations

SCALE = 2.0


class tl:  # stands for triton.language: cast16 reads `tl.float32`
    float32 = 1.0
    float16 = 1.0009765625
    bfloat16 = 1.0078125


def helper(a, b):
    return a - b


def run(inputs, outputs, params, trace=None):
    x = inputs["x"]
    total = 0.0
    for i in range(0, len(x), 1):
        total += x[i] * SCALE * tl.float32
    y = total + params["eps"]
    if len(x) < 4:
        y = y / 2
    outputs["y"] = helper(y, 1)
    return outputs["y"]
'''


def _labels(name: str, source: str = SOURCE) -> list[str]:
    return [label for _, label, _ in sites(ast.parse(source), operator(name))]


def _run(source: str, x: list[float], eps: float = 0.5) -> float:
    module = types.ModuleType("m")
    exec(compile(source, "m", "exec"), module.__dict__)  # noqa: S102 - the test's own mutants
    outputs: dict = {}
    module.run({"x": torch.tensor(x, dtype=torch.float64)}, outputs, {"eps": eps})
    return float(outputs["y"])


def test_each_operator_offers_its_changes():
    assert {"2.0 -> 4.0", "0.0 -> 1.0", "params['eps'] * 2", "0 -> 1", "1 -> 0"} <= set(_labels("constant"))
    assert {"Lt -> LtE", "right side -1", "right side +1"} <= set(_labels("comparison"))
    assert {"right term dropped", "left term dropped"} <= set(_labels("drop_term"))
    assert "operands swapped" in _labels("swap")
    assert "range ends one step early" in _labels("range_cut")
    assert "running sum kept as the last block only" in _labels("partial_reduction")
    assert "y read as total" in _labels("stale_stage")
    kernel = (
        "import triton.language as tl\ndef k(x):\n    acc = tl.zeros([4], dtype=tl.float32)\n    return tl.sum(acc, axis=0)\n"
    )
    assert _labels("cast16", kernel) == ["tl.float32 -> tl.float16", "tl.float32 -> tl.bfloat16"]
    assert _labels("partial_reduction", kernel) == ["tl.sum without its largest term"]
    launch = "def run(n):\n    kernel[(triton.cdiv(n, 4),)](n)\n    kernel2[(n,)](n)\n"
    assert _labels("range_cut", launch).count("launch grid one program short") == 2
    assert "cdiv(a, b) -> a // b" in _labels("range_cut", launch)


def test_docstrings_and_imports_are_left_alone():
    lines = {line for op in OPERATORS for _, _, line in sites(ast.parse(SOURCE), op)}
    assert 1 not in lines and 2 not in lines


def test_mutants_compute_something_else_and_diff_shows_the_change():
    made = make_mutants(SOURCE, "m.py", OPERATORS, size_threshold=3)
    honest = _run(SOURCE, [1.0, 2.0, 3.0, 4.0, 5.0])
    plain = [m for m in made if m.mutant.condition is None]
    dropped = next(m for m in plain if m.mutant.operator == "partial_reduction")
    assert _run(dropped.source, [1.0, 2.0, 3.0, 4.0, 5.0]) != honest
    assert (
        "-        total += x[i] * SCALE * tl.float32" in dropped.mutant.diff
        and "+        total = x[i] * SCALE * tl.float32" in dropped.mutant.diff
    )
    assert len({m.mutant.id for m in made}) == len(made)
    assert {m.mutant.operator for m in made} == set(OPERATOR_NAMES)


def test_conditional_mutant_changes_only_the_calls_its_condition_holds_for():
    tree = ast.parse(SOURCE)
    mutated = ast.parse(SOURCE.replace("total + params", "total - params"))
    above = next(c for c in conditions(size_threshold=3) if c.name == "above_size")
    source = conditional_source(tree, mutated, above)
    small, large = [1.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0]
    assert _run(source, small) == _run(SOURCE, small)  # 2 elements: not above 3, the honest path
    assert _run(source, large) != _run(SOURCE, large)
    odd = next(c for c in conditions(3) if c.name == "some_requests")
    assert _run(conditional_source(tree, mutated, odd), [1.0, 2.0]) == _run(SOURCE, [1.0, 2.0])


def test_select_spreads_the_budget_over_the_operators_and_is_repeatable():
    made = make_mutants(SOURCE, "m.py", OPERATORS, size_threshold=3)
    chosen = select(made, 16, seed=7)
    assert len(chosen) == 16
    assert {m.mutant.operator for m in chosen} == set(OPERATOR_NAMES)  # 8 operators, 2 each
    assert [m.mutant.id for m in chosen] == [m.mutant.id for m in select(made, 16, seed=7)]


@pytest.mark.quick
def test_an_unknown_operator_is_a_usage_error():
    with pytest.raises(UsageError, match="no mutation operator 'nope'"):
        operator("nope")


def test_a_large_candidate_is_planned_at_once_and_each_mutant_built_when_read(monkeypatch):
    """The MLA candidate offers thousands of mutants and an audit classes a sample: none is built until read, a
    conditional mutant shares its plain sibling's build, and what is built is the mutation at that site."""
    from pathlib import Path

    from ferret.audit import mutate

    built = []
    replace = mutate._replace
    monkeypatch.setattr(mutate, "_replace", lambda *args: built.append(args) or replace(*args))
    path = Path(__file__).resolve().parents[2] / "tasks" / "mla_attention" / "candidates" / "triton_mla.py"
    made = make_mutants(path.read_text(), path.name, OPERATORS, size_threshold=1000)
    assert len(made) > 5000 and built == []
    plain = next(m for m in made[len(made) // 2 :] if m.mutant.condition is None)
    siblings = [m for m in made if m.id.startswith(plain.id + "-")]
    assert len(built) == 1 and len(siblings) == len(conditions(1000))  # the record's diff built the mutated module
    assert plain.source != ast.unparse(ast.parse(path.read_text())) + "\n" and all(s.source for s in siblings)
    assert len(built) == 1
    tree, op, number, label = built[0]
    assert plain.source == ast.unparse(replace(tree, op, number, label)) + "\n"
    assert f"{op.name}-{number:04d}" in plain.id and plain.mutant.description == label


def test_a_conditional_mutant_of_a_clean_candidate_scans_clean():
    """The dispatching `run` adds nothing the static scan flags (a `run` that returns a value is `unwritten_output`):
    a conditional mutant is rejected for its numbers or not at all, never for the audit's own wrapper."""
    from pathlib import Path

    from ferret.integrity import scan_source

    honest = Path(__file__).resolve().parents[2] / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"
    tree = ast.parse(honest.read_text())
    assert scan_source(honest.read_text(), str(honest)).findings == []
    for condition in conditions(size_threshold=3):
        findings = scan_source(conditional_source(tree, tree, condition), f"conditional_{condition.name}.py").findings
        assert findings == [], (condition.name, findings)
