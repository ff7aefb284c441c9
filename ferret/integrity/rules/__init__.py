"""The scan's rules, one module per family; importing this package registers them all.

The families are imported in the order below, which is the rules' rank. Rank matters only where two
rules report the same cheat on the same spot from the same node (see `ferret.integrity.registry`): a
store's own rules come before the @ operator's (`y[0] @= x` is an indexing copy first), a banned
builtin before the module it imports (`__import__("os")`), an import's mention before its table entry,
and a name's or attribute's own table before the general mention tables. The loop keeps that order out
of reach of import sorting.
"""

import importlib

FAMILIES = ("outputs", "state", "tensors", "calls", "imports", "names", "precision", "cases", "decoys", "cuda", "dynamic")

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
