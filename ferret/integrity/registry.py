"""The registry of scan rules: each rule is one small function that finds one pattern of one cheat.

    @rule("try_fallback", "library_call")
    def try_fallback(ctx):
        '''try/except around the launch: a fallback path the gate does not judge.'''
        for node in ctx.nodes_of(ast.Try):
            if node.handlers:
                yield Hit(node, "try/except: ...")

A rule takes a `ScanContext` and yields `Hit`s; the scan turns each into a `Finding` of the rule's cheat,
on the hit's line and column. Several rules may report the same cheat. Where two hits of one cheat land
on the same spot only one finding is kept: the hit the walk came to first (the node examined earlier;
on the same node, the earlier step, then the earlier registered rule, then the earlier hit). That is the
order in which the single-visitor scan this registry replaced made its checks, so the message kept is
the one it gave.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ferret.integrity.context import ScanContext
from ferret.integrity.model import CHEATS


class Hit(NamedTuple):
    """One match of a rule: where it is reported, and what was found and why it is banned."""

    node: ast.AST  # its line and column are the finding's
    detail: str
    via: ast.AST | None = None  # the node whose examination found it, where that is not `node` itself
    step: int = 0  # which of that node's subjects (the names of one import statement) it concerns


Check = Callable[[ScanContext], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    name: str
    cheat: str  # a slug of CHEATS
    check: Check
    rank: int  # registration order: among hits on one node, the earlier rule's comes first
    after_walk: bool = False  # a whole-module check: its hits come after every node's
    doc: str = ""

    @property
    def catalogue(self) -> list[int]:
        """The entries of docs/cheats.md the rule's cheat belongs to."""
        return CHEATS[self.cheat]


RULES: dict[str, Rule] = {}


def register(name: str, cheat: str, check: Check, after_walk: bool = False, doc: str | None = None) -> Rule:
    """Add a rule. A name is registered once; the cheat must be in the catalogue."""
    if name in RULES:
        raise ValueError(f"scan rule {name!r} is registered twice")
    if not CHEATS.get(cheat):
        raise ValueError(f"scan rule {name!r} reports {cheat!r}, which is not a cheat of the catalogue")
    text = doc if doc is not None else (check.__doc__ or "")
    RULES[name] = Rule(name, cheat, check, len(RULES), after_walk, " ".join(text.split()))
    return RULES[name]


def rule(name: str, cheat: str, after_walk: bool = False) -> Callable[[Check], Check]:
    """Decorator form of `register`; the function's docstring describes the rule."""

    def decorate(check: Check) -> Check:
        register(name, cheat, check, after_walk)
        return check

    return decorate


def catalogue_rows() -> Iterator[tuple[str, str, list[int], str]]:
    """(rule, cheat, docs/cheats.md entries, description) for every registered rule, in rank order."""
    for r in RULES.values():
        yield r.name, r.cheat, r.catalogue, r.doc
