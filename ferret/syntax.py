"""Python source parsed from any thread. CPython 3.11, and 3.12 before its fix (python/cpython#106905), keeps the AST
constructor's recursion depth in state the threads share: two threads parsing at once can raise `SystemError: AST
constructor recursion depth mismatch` (two checks judged at once in threads did). Ferret parses through these
functions, one parse at a time."""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse_module(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    with _ONE_AT_A_TIME:
        return ast.parse(source, mode="eval")
