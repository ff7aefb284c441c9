"""Ferret's structure, held in place by reading its source (ast; nothing is imported or run):

- no import cycle among ferret's modules, counting every import: at module level, inside functions and
  under TYPE_CHECKING (a cycle that only type checkers see still ties two modules together);
- no import from a lower layer up into a higher one, the layers declared below as data, lowest first;
- no function or method longer than MAX_FUNCTION_LINES lines, but for the allow-list below.

Imports made from a string (`importlib.import_module("ferret.x")`, as ferret/__init__.py's lazy exports
do) are not seen: they load only on use, which is why they are written that way.

The checkers take a folder and a package name, so the tests at the end run them on a small package made
in tmp_path, to show that each one reports what it should.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from textwrap import dedent

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "ferret"

# Lowest first. A module may import from its own layer and those below, never from one above. A module
# belongs to the layer of the longest name that is it or a package above it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: the standard library only
    ("ferret.errors", "ferret.wire", "ferret.progress", "ferret.private_folders", "ferret.syntax"),
    # candidate languages (ferret/backends/registry.py): the contract names them, the scan, sandbox and gate ask them
    ("ferret.backends",),
    ("ferret.contract",),
    ("ferret.integrity", "ferret.sandbox"),
    ("ferret.bench",),
    # below the gate: model backends need only the leaves (the folders an agent is denied: ferret.private_folders)
    ("ferret.models",),
    ("ferret.gate",),
    ("ferret.roles",),
    # `ferret gate audit`: the gate's strength by mutation testing; the dispatcher runs it (`--audit`), reports show it
    ("ferret.audit",),
    ("ferret.dispatch",),
    ("ferret.reporting",),  # `ferret report`: renders the gate's and the dispatcher's records
    ("ferret.export",),  # `ferret export`: a kernel that passed the gate, as a torch.library op
    ("ferret.scaffold",),  # `ferret new`: writes an example op and calibrates it (ferret.gate.calibrate)
    ("ferret.cli",),
)
# ferret/__init__.py only names the public API and imports it lazily, by string; it is in no layer, and
# importing it (`import ferret`, to find the installed sources) goes up into nothing.
UNLAYERED: frozenset[str] = frozenset({"ferret"})

MAX_FUNCTION_LINES = 80
# "path:qualified name" -> why it is still long. Lines are counted from `def` to the function's last line.
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}


# --- the checkers -------------------------------------------------------------------------------------


def module_files(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of `package` under `root`: its dotted name -> (its file, whether it is a package)."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def _imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules) -> list[str]:
    """The modules of the package one import statement names: `import a.b` is a.b; `from a import b` is
    a.b when that is a module, else a (b is a name in it); relative imports count from the module's package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        if node.level - 1 > len(package) - 1:
            return []  # above the top package: not an import of ours
        base = ".".join(package[: len(package) - (node.level - 1)] + ([base] if base else []))
    found = []
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            found.append(f"{base}.{alias.name}")
        elif base in modules:
            found.append(base)
    return found


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the first line that does}, over every import statement in the file
    (module level, in functions, under TYPE_CHECKING); imports of outside packages are left out."""
    modules = module_files(root, package)
    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported_modules(node, module, is_package, modules):
                    if target != module:
                        edges.setdefault(target, node.lineno)
                        edges[target] = min(edges[target], node.lineno)
        graph[module] = edges
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components, iteratively (no recursion limit to meet on a deep graph)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _a_cycle(start: str, members: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """One shortest path start -> ... -> start inside a component (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if target in members and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return [start]


def import_cycles(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each group of modules that import one another, in words: its members and one cycle through them,
    with the line of every import on the way."""
    found = []
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        cycle = _a_cycle(component[0], set(component), graph)
        steps = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)) + f" -> {cycle[-1]}"
        found.append(f"{', '.join(component)}: {steps}")
    return found


def layer_of(module: str, layers=LAYERS) -> int | None:
    best, best_length = None, -1
    for number, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_length:
                best, best_length = number, len(name)
    return best


def upward_imports(graph: dict[str, dict[str, int]], layers=LAYERS, unlayered=UNLAYERED) -> list[str]:
    """Each import of a module from a higher layer, as `module (layer) imports target (layer), line N`."""
    found = []
    for module, edges in sorted(graph.items()):
        mine = layer_of(module, layers)
        if module in unlayered or mine is None:
            continue
        for target, line in sorted(edges.items()):
            theirs = layer_of(target, layers)
            if target not in unlayered and theirs is not None and theirs > mine:
                found.append(
                    f"{module} (layer {mine}: {', '.join(layers[mine])}) imports {target} "
                    f"(layer {theirs}: {', '.join(layers[theirs])}), line {line}"
                )
    return found


def modules_without_a_layer(graph: dict[str, dict[str, int]], layers=LAYERS, unlayered=UNLAYERED) -> list[str]:
    return sorted(m for m in graph if m not in unlayered and layer_of(m, layers) is None)


def _functions_in(node: ast.AST, prefix: str = ""):
    """(qualified name, lines from `def` to its last line) of every function and method under `node`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{child.name}", child.end_lineno - child.lineno + 1
            yield from _functions_in(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions_in(child, f"{prefix}{child.name}.")
        else:
            yield from _functions_in(child, prefix)


def function_lengths(root: Path, package: str) -> dict[str, int]:
    """`path:Qualified.name` -> its lines, for every function and method (a nested function counts on its
    own, and inside the one around it)."""
    lengths = {}
    for path, _ in module_files(root, package).values():
        relative = path.relative_to(root).as_posix()
        for name, lines in _functions_in(ast.parse(path.read_text(), filename=str(path))):
            lengths[f"{relative}:{name}"] = lines
    return lengths


def long_functions(root: Path, package: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    return {name: n for name, n in function_lengths(root, package).items() if n > limit}


def _listed(title: str, lines: list[str]) -> str:
    return title + ":\n  " + "\n  ".join(lines)


# --- ferret itself ------------------------------------------------------------------------------------


@pytest.mark.quick
def test_no_import_cycle_among_ferrets_modules():
    cycles = import_cycles(import_graph(REPO, PACKAGE))
    assert not cycles, _listed("modules that import one another (at module level, in a function or under TYPE_CHECKING)", cycles)


def test_no_import_goes_up_a_layer():
    upward = upward_imports(import_graph(REPO, PACKAGE))
    assert not upward, _listed("imports from a higher layer (LAYERS in tests/test_architecture.py, lowest first)", upward)


def test_every_module_is_in_a_declared_layer():
    missing = modules_without_a_layer(import_graph(REPO, PACKAGE))
    assert not missing, _listed("modules in no layer: add their package to LAYERS", missing)


def test_every_declared_layer_names_a_module():
    modules = module_files(REPO, PACKAGE)
    stale = sorted(name for names in LAYERS for name in names if name not in modules)
    assert not stale, _listed("LAYERS names modules that do not exist", stale)


def test_no_function_is_longer_than_the_limit():
    long = {name: n for name, n in long_functions(REPO, PACKAGE).items() if name not in LONG_FUNCTIONS_ALLOWED}
    assert not long, _listed(
        f"functions over {MAX_FUNCTION_LINES} lines: split them into small functions with names",
        [f"{name}: {n} lines" for name, n in sorted(long.items(), key=lambda kv: -kv[1])],
    )


def test_the_allow_list_of_long_functions_only_holds_long_functions():
    long = long_functions(REPO, PACKAGE)
    stale = sorted(name for name in LONG_FUNCTIONS_ALLOWED if name not in long)
    assert not stale, _listed("allowed long functions that are gone or short now: take them off LONG_FUNCTIONS_ALLOWED", stale)


# --- the checkers, on a package made for them ---------------------------------------------------------


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text))


SYNTHETIC_LAYERS = (("pkg.low",), ("pkg.high",))


def _synthetic(tmp_path: Path) -> Path:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(79))  # def + 79 lines + return = 81 lines
    ok_body = "".join(f"    x{i} = {i}\n" for i in range(78))  # 80 lines: at the limit, not over it
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/high/__init__.py": "",
            # a cycle through an import inside a function, which is also an import from a higher layer
            "pkg/low/a.py": "def f():\n    from pkg.high import b\n    return b\n",
            "pkg/high/b.py": "from ..low import a\n",
            # a cycle that only type checkers see; `from pkg.low import c` is the module pkg.low.c
            "pkg/low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low.d import D\n",
            "pkg/low/d.py": "from pkg.low import c\nclass D: ...\n",
            # `from pkg.low import name` is the package pkg.low; an outside import is no edge
            "pkg/high/e.py": "import os\nfrom pkg.low import something\nfrom . import b\n",
            "pkg/high/long.py": (
                "def too_long():\n" + long_body + "    return 0\n\n"
                "def just_fits():\n" + ok_body + "    return 0\n\n"
                "class Holder:\n    def method(self):\n"
                + "".join("    " + line for line in long_body.splitlines(True))
                + "        return 0\n"
            ),
            "pkg/other/__init__.py": "",
        },
    )
    return tmp_path


def test_the_graph_resolves_plain_relative_and_from_imports(tmp_path):
    graph = import_graph(_synthetic(tmp_path), "pkg")
    assert graph["pkg.low.a"] == {"pkg.high.b": 2}
    assert graph["pkg.high.b"] == {"pkg.low.a": 1}
    assert graph["pkg.low.c"] == {"pkg.low.d": 3}
    assert graph["pkg.low.d"] == {"pkg.low.c": 1}
    assert graph["pkg.high.e"] == {"pkg.low": 2, "pkg.high.b": 3}


def test_the_cycle_checker_reports_each_cycle_with_its_lines(tmp_path):
    cycles = import_cycles(import_graph(_synthetic(tmp_path), "pkg"))
    assert cycles == [
        "pkg.high.b, pkg.low.a: pkg.high.b (line 1) -> pkg.low.a (line 2) -> pkg.high.b",
        "pkg.low.c, pkg.low.d: pkg.low.c (line 3) -> pkg.low.d (line 1) -> pkg.low.c",
    ], cycles


def test_the_cycle_checker_finds_a_longer_cycle():
    graph = {"m.a": {"m.b": 1}, "m.b": {"m.c": 2}, "m.c": {"m.a": 3, "m.d": 4}, "m.d": {}}
    assert import_cycles(graph) == ["m.a, m.b, m.c: m.a (line 1) -> m.b (line 2) -> m.c (line 3) -> m.a"]


def test_the_layer_checker_reports_an_import_from_a_higher_layer(tmp_path):
    graph = import_graph(_synthetic(tmp_path), "pkg")
    assert upward_imports(graph, SYNTHETIC_LAYERS, frozenset({"pkg"})) == [
        "pkg.low.a (layer 0: pkg.low) imports pkg.high.b (layer 1: pkg.high), line 2"
    ]
    assert modules_without_a_layer(graph, SYNTHETIC_LAYERS, frozenset({"pkg"})) == ["pkg.other"]


def test_the_length_checker_reports_long_functions_and_methods(tmp_path):
    root = _synthetic(tmp_path)
    lengths = function_lengths(root, "pkg")
    assert lengths["pkg/high/long.py:just_fits"] == MAX_FUNCTION_LINES
    assert long_functions(root, "pkg") == {"pkg/high/long.py:too_long": 81, "pkg/high/long.py:Holder.method": 81}
