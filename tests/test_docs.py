"""The docs name only what exists: every repository path, `ferret.x.y` symbol, `ferret <command>` and
`python -m <module>` named in the project's Markdown is checked against the tree, the package and the
command line; the cheat catalogue lists every number the code cites, each entry with a test that exists;
README.md and DESIGN.md stay short."""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import typer

from ferret.cli.main import app
from ferret.integrity.model import CHEATS
from ferret.scaffold.new_op import _TEMPLATES

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "DESIGN.md",
        ROOT / "SECURITY.md",
        ROOT / "contracts" / "README.md",
        ROOT / "tests" / "adversarial" / "README.md",
    }
    | set((ROOT / "docs").glob("*.md"))
    | set((ROOT / "tasks").glob("*/README.md"))
)
TOP = ("ferret", "tasks", "tests", "contracts", "benchmarks", "scripts", "agents", "docs")
# Folders made at run time (a fresh clone has none of their contents): named as forms, never checked.
RUNTIME = ("gates/", "runs/")
FERRET_PACKAGES = tuple(p.name for p in (ROOT / "ferret").iterdir() if p.is_dir() and (p / "__init__.py").exists())
PATH = re.compile(r"(?<![\w./<>-])([a-z_]+/(?:[\w.<>*{},-]+/)*[\w.<>*{},-]*)")
PLACEHOLDER = re.compile(r"<[^<>]*>|NN")  # a name standing for any op, hash, run or number
EXAMPLE_OP = "my_op"  # the op the docs make with `ferret new my_op`: its files are the scaffold's
SCAFFOLD_FILES = {*_TEMPLATES, "contracts/{op}.tolerances.yaml"}  # the table is calibrate's, run by `ferret new`
SYMBOL = re.compile(r"(?<![\w./])ferret(?:\.[A-Za-z_]\w*)+")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?<![\w./-])(?<!from )(?<!import )ferret ([a-z][\w-]*)(?: ([a-z][\w-]*))?")
MODULE_RUN = re.compile(r"python -m ([\w.]+)")


def _code(text: str) -> list[str]:
    """The inline code spans and the fenced blocks' lines of a Markdown text."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    outside = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return CODE_SPAN.findall(outside) + [line for block in blocks for line in block.splitlines()]


def _expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for choice in match.group(1).split(",") for p in _expand_braces(head + choice + tail)]


def _repository_path(token: str) -> str | None:
    """The path a token names inside the repository, or None when it names none (a URL, a module path
    of the host, a run-time folder). `sandbox/runner.py` is read as ferret/sandbox/runner.py."""
    token = token.rstrip(".,:;)")
    first = token.split("/", 1)[0]
    if token.startswith(RUNTIME) or first not in TOP + FERRET_PACKAGES:
        return None
    return token if first in TOP else f"ferret/{token}"


def _scaffold_writes(path: str) -> bool:
    """Whether `ferret new` writes this path (a file or a folder of one) for the example op."""
    form = path.replace(EXAMPLE_OP, "{op}")
    return any(name == form or name.startswith(form.rstrip("/") + "/") for name in SCAFFOLD_FILES)


def _exists(path: str) -> bool:
    if EXAMPLE_OP in path:
        return _scaffold_writes(path)
    for one in _expand_braces(path):
        pattern = PLACEHOLDER.sub("*", one)
        if "*" in pattern:
            if not glob.glob(str(ROOT / pattern)):
                return False
        elif not (ROOT / pattern).exists():
            return False
    return True


def named_paths(text: str) -> set[str]:
    found = set()
    for token in PATH.findall(text):
        path = _repository_path(token)
        if path is not None and not path.endswith((".", "..")):
            found.add(path)
    return found


def _symbol_exists(dotted: str) -> bool:
    """Import the longest module prefix of `dotted`, then getattr the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:  # a name inside a module, not a submodule
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(module_name)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _commands() -> dict[str, set[str]]:
    """Each `ferret` command, and for a group its subcommands."""
    root = typer.main.get_command(app)
    return {name: set(getattr(cmd, "commands", {})) for name, cmd in root.commands.items()}  # type: ignore[attr-defined]


def _relative(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def test_the_checked_docs_exist():
    assert {_relative(d) for d in DOCS} >= {
        "README.md",
        "DESIGN.md",
        "SECURITY.md",
        "docs/cheats.md",
        "tasks/mla_attention/README.md",
        "contracts/README.md",
        "tests/adversarial/README.md",
    }
    design = (ROOT / "DESIGN.md").read_text()
    assert len(named_paths(design)) > 20 and len(set(SYMBOL.findall(design))) > 5, "the extraction reads the docs"


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_path_the_doc_names_exists(doc: Path):
    missing = sorted(p for p in named_paths(doc.read_text()) if not _exists(p))
    assert not missing, f"{_relative(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_ferret_symbol_the_doc_names_exists(doc: Path):
    symbols = set(SYMBOL.findall(doc.read_text()))
    missing = sorted(s for s in symbols if not _symbol_exists(s))
    assert not missing, f"{_relative(doc)} names symbols that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_ferret_command_the_doc_names_exists(doc: Path):
    commands, wrong = _commands(), []
    for line in _code(doc.read_text()):
        for command, sub in COMMAND.findall(line):
            if command not in commands:
                wrong.append(f"ferret {command}")
            elif commands[command] and sub not in commands[command]:
                wrong.append(f"ferret {command} {sub}")
    assert not wrong, f"{_relative(doc)} names commands `ferret` does not have: {sorted(set(wrong))}"


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_module_run_with_python_m_exists(doc: Path):
    modules = set(MODULE_RUN.findall(doc.read_text()))
    missing = sorted(m for m in modules if importlib.util.find_spec(m.rstrip(".")) is None)
    assert not missing, f"{_relative(doc)} runs modules that do not exist: {missing}"


def _catalogue_numbers_in_code() -> set[int]:
    """Every catalogue number the code cites: the scan's map, and each `catalogue=[...]` or table literal."""
    numbers = {n for entries in CHEATS.values() for n in entries}
    for source in (ROOT / "ferret").rglob("*.py"):
        text = source.read_text()
        for literal in re.findall(r"catalogue=\[([\d, ]+)\]", text):
            numbers |= {int(n) for n in literal.split(",") if n.strip()}
        for table in re.findall(r"^[A-Z_]*CATALOGUE = (\{.*?\})$", text, flags=re.M | re.S):
            numbers |= {n for entries in ast.literal_eval(table).values() for n in entries}
    return numbers


def _catalogue_entries() -> dict[int, str]:
    text = (ROOT / "docs" / "cheats.md").read_text()
    starts = list(re.finditer(r"^(\d+)\. \*\*", text, flags=re.M))
    ends = [m.start() for m in starts[1:]] + [text.find("\n## ", starts[-1].start())]
    return {int(m.group(1)): text[m.start() : end] for m, end in zip(starts, ends, strict=True)}


def test_the_catalogue_lists_every_number_the_code_cites():
    entries = _catalogue_entries()
    assert sorted(entries) == list(range(1, max(entries) + 1)), "entries numbered 1, 2, ... without a gap"
    missing = sorted(_catalogue_numbers_in_code() - set(entries))
    assert not missing, f"docs/cheats.md has no entry for the numbers {missing}, which the code cites"


def test_every_catalogue_entry_has_a_defence_and_a_test_that_exists():
    for number, entry in _catalogue_entries().items():
        assert "*Defence*" in entry, f"entry {number} says no defence"
        tests = [p for p in named_paths(entry.split("*Test*", 1)[-1]) if p.startswith("tests/")]
        assert "*Test*" in entry and tests, f"entry {number} names no test"
        missing = [p for p in tests if not _exists(p)]
        assert not missing, f"entry {number} names tests that do not exist: {missing}"


def test_every_adversarial_candidate_is_filed_under_its_entry():
    entries = _catalogue_entries()
    for candidate in sorted((ROOT / "tests" / "adversarial" / "candidates").glob("c[0-9][0-9]*.py")):
        number = int(candidate.name[1:3])
        assert f"tests/adversarial/candidates/{candidate.name}" in entries.get(number, ""), (
            f"{candidate.name} is not named under entry {number} of docs/cheats.md"
        )


@pytest.mark.parametrize(("doc", "limit"), [("README.md", 150), ("DESIGN.md", 350)])
def test_the_front_docs_stay_short(doc: str, limit: int):
    lines = (ROOT / doc).read_text().count("\n")
    assert lines <= limit, f"{doc} has {lines} lines, over {limit}"


def test_the_checker_sees_what_it_must():
    """The extraction itself: a path, a ferret-relative path, a brace form, a placeholder, a run-time folder,
    a symbol, a command; and a name that does not exist is reported missing."""
    text = (
        "See `ferret/gate/judge.py`, `sandbox/runner.py`, `tasks/{rmsnorm,softmax}/reference.py`, "
        "`contracts/<op>.yaml`, `runs/<id>/run.json` and `tasks/nothing_here.py`."
    )
    paths = named_paths(text)
    assert paths == {
        "ferret/gate/judge.py",
        "ferret/sandbox/runner.py",
        "tasks/{rmsnorm,softmax}/reference.py",
        "contracts/<op>.yaml",
        "tasks/nothing_here.py",
    }
    assert [p for p in sorted(paths) if not _exists(p)] == ["tasks/nothing_here.py"]
    assert not _exists("tasks/{rmsnorm,nothing}/reference.py")
    assert _exists("tasks/my_op/candidates/wrong_my_op.py") and _exists("tests/tasks/my_op/")
    assert not _exists("tasks/my_op/oracle.py")
    assert _symbol_exists("ferret.gate.judge.check") and _symbol_exists("ferret.read_report")
    assert not _symbol_exists("ferret.gate.judge.no_such_name")
    assert not _symbol_exists("ferret.no_such_module")
    assert COMMAND.findall("ferret gate verify gates/<hash>") == [("gate", "verify")]
    assert COMMAND.findall("from ferret import check") == []
    assert "check" in _commands() and "verify" in _commands()["gate"]
