"""Ferret's maintained benchmarks, under one driver.

    python -m benchmarks                    # the list, one line each
    python -m benchmarks NAME --help        # one benchmark's options
    python -m benchmarks NAME [OPTIONS]     # run it (most take --out; those that time a GPU take --cpu too)

Each benchmark is a module of this package with a `main(argv)`, registered by name in BENCHMARKS. What it measures,
and how to run it on a GPU, is in benchmarks/README.md; the figures the docs cite are in benchmarks/results/.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

BENCHMARKS: dict[str, str] = {
    "mla": "benchmarks.mla",
    "mla-served": "benchmarks.mla_served",
    "timing": "benchmarks.timing",
    "search-setup": "benchmarks.search_setup",
    "tolerances": "benchmarks.tolerances",
}


def load(name: str) -> ModuleType:
    """The module of the benchmark registered as `name`."""
    return importlib.import_module(BENCHMARKS[name])


def summary(name: str) -> str:
    """The first line of the benchmark's docstring."""
    return (load(name).__doc__ or "").strip().splitlines()[0]


def listing() -> str:
    width = max(map(len, BENCHMARKS))
    return "\n".join(f"  {name:<{width}}  {summary(name)}" for name in BENCHMARKS)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "--list"):
        print("usage: python -m benchmarks NAME [OPTIONS]\n\nbenchmarks:\n" + listing())
        return 0
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"no benchmark named {name!r}; the benchmarks:\n{listing()}", file=sys.stderr)
        return 2
    return int(load(name).main(rest) or 0)
