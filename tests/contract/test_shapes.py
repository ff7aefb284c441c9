"""Shape expressions: arithmetic over dims, evaluated by an AST walker that refuses anything else."""

from __future__ import annotations

import pytest

from ferret.contract.shapes import check_expression, evaluate, evaluate_shape

DIMS = {"B": 2, "H": 3, "L": 10, "N": 7}


@pytest.mark.parametrize(
    "expr, value",
    [
        (5, 5),
        ("5", 5),
        ("B", 2),
        ("H * 256", 768),
        ("L - 1", 9),
        ("B + H * L", 32),
        ("(B + H) * L", 50),
        ("L // 3", 3),
        ("L % 3", 1),
        ("2 ** H", 8),
        ("-B + L", 8),
        ("min(B, H)", 2),
        ("max(B, H, L)", 10),
        ("max(L - 1, 2 * N) // 2", 7),
        ("min(N)", 7),
    ],
)
def test_evaluate(expr, value):
    assert evaluate(expr, DIMS) == value


def test_evaluate_shape():
    assert evaluate_shape(["B", "H * L", 4], DIMS) == (2, 30, 4)
    assert evaluate_shape([], DIMS) == ()


def test_unknown_dim():
    with pytest.raises(ValueError, match=r"unknown dim 'K'"):
        evaluate("K * 2", DIMS)


def test_division_by_zero():
    with pytest.raises(ValueError, match="division by zero"):
        evaluate("L // (B - 2)", DIMS)


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "B.bit_length()",
        "B.real",
        "abs(B)",
        "eval('1')",
        "max(B, key=__import__('os').getpid)",
        "max()",
        "min(*B)",
        "[B, H]",
        "B if H else L",
        "lambda: 1",
        "B / 2",
        "1.5",
        "True",
        "B < H",
        "'B'",
        "B[0]",
        "~B",
    ],
)
def test_refuses_anything_but_arithmetic(expr):
    with pytest.raises(ValueError):
        evaluate(expr, DIMS)
    with pytest.raises(ValueError):
        check_expression(expr, set(DIMS))


def test_import_is_never_executed(monkeypatch):
    import builtins

    real_import = builtins.__import__
    calls = []

    def recording_import(name, *args, **kwargs):
        calls.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", recording_import)
    with pytest.raises(ValueError, match="unsupported syntax"):
        evaluate("__import__('ferret_never_imported_module')", DIMS)
    monkeypatch.undo()
    assert "ferret_never_imported_module" not in calls


def test_bool_is_not_an_integer():
    with pytest.raises(ValueError):
        evaluate(True, DIMS)


def test_parse_error():
    with pytest.raises(ValueError, match="cannot parse"):
        evaluate("B *", DIMS)


def test_check_expression_knows_the_case_dims():
    check_expression("B * H + max(L, N) // 2", set(DIMS))
    check_expression(3, set())
    with pytest.raises(ValueError, match=r"unknown dim 'Q'.*cases define \['B', 'H', 'L', 'N'\]"):
        check_expression("Q + B", set(DIMS))
    # A zero divisor with placeholder values is not an error at check time; it is one at evaluation.
    check_expression("L // (B - 1)", set(DIMS))
