"""Parsing from threads (`ferret.syntax`): CPython 3.11's AST constructor shares its recursion depth between threads,
and two checks judged at once in threads raised `SystemError: AST constructor recursion depth mismatch` in the scan.
The race is rare (a thread switch inside the constructor) and nothing here provokes it at will: what is tested is
that every parse in Ferret takes the one lock, and that its parses are ast's."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ferret.syntax import parse_expression, parse_module

REPO = Path(__file__).resolve().parents[1]


def test_parses_from_many_threads_are_asts_own():
    sources = [p.read_text() for p in sorted((REPO / "tasks").rglob("*.py"))[:12]]
    deep = "x = " + "(" * 90 + "1" + ")" * 90
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(parse_module, [*sources, deep] * 20))
    assert all(isinstance(t, ast.Module) for t in trees)
    assert ast.dump(trees[-1]) == ast.dump(ast.parse(deep))


def test_an_expression_parses_as_ast_does():
    assert ast.dump(parse_expression("B * 256 + L - 1")) == ast.dump(ast.parse("B * 256 + L - 1", mode="eval"))


def test_no_module_of_ferret_parses_python_without_it():
    users = [p for p in (REPO / "ferret").rglob("*.py") if "ast.parse(" in p.read_text() and p.name != "syntax.py"]
    assert not users, users
