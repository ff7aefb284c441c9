"""The lock: a gate's hash is the sha256 of its manifest, and the manifest holds the sha256 of every
file in the gate, of the judge's own source, and of the project's files the judge loads for the gate's
contract (the task's modules and the tolerance file). Verification recomputes all of it."""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ferret
from ferret.contract.load import tolerance_file
from ferret.contract.model import Contract
from ferret.errors import GateTampered
from ferret.gate.trust import is_trusted, trust_dir
from ferret.syntax import parse_module

REPORT_FILE = "report.json"
MANIFEST_FILE = "manifest.json"
# Files the judge writes beside the locked ones; everything else in a gate folder must be in the manifest.
VERDICTS_FOLDER = "verdicts"  # each verdict whole (ferret/gate/report.py): outside the lock, like the index
# The gate's audit (ferret/audit/): its record and its working folder are measurements of the gate, not part of it;
# the record's digest is kept in the trust registry instead (ferret.gate.trust.record_audit).
AUDIT_FILE = "audit.json"
AUDIT_FOLDER = "audit"
UNLOCKED_FILES = frozenset({REPORT_FILE, REPORT_FILE + ".lock", REPORT_FILE + ".tmp", AUDIT_FILE, AUDIT_FILE + ".tmp"})
UNLOCKED_FOLDERS = frozenset({VERDICTS_FOLDER, AUDIT_FOLDER})
# The judge's own source: editing any of it changes what a verdict means, so it counts as tampering. What
# it is comes from the code, not from a list kept by hand: every ferret module that these entry points
# import, directly or not (at module level or inside a function), and the packages holding them.
JUDGE_ENTRY_POINTS = ("ferret.gate.judge", "ferret.gate.build", "ferret.sandbox.runner", "ferret.bench.process")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(root: Path, names: list[str]) -> dict[str, str]:
    """sha256 of each file `root / name`, several at once (hashlib lets go of the GIL over large buffers: a
    GPU gate's golden stages are gigabytes)."""
    if len(names) < 2:
        return {name: sha256_file(root / name) for name in names}
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, len(names))) as pool:
        return dict(zip(names, pool.map(lambda name: sha256_file(root / name), names), strict=True))


def judge_source_hashes() -> dict[str, str]:
    root = Path(ferret.__file__).resolve().parent
    return {f"ferret/{path.relative_to(root).as_posix()}": sha256_file(path) for path in judge_source_files(root)}


def judge_source_files(root: Path) -> list[Path]:
    """The files of every ferret module the judge's entry points import, found by reading their imports
    (ast): nothing is imported or run to find them."""
    return _imported_files(JUDGE_ENTRY_POINTS, lambda module: _module_file(root, module))


def _imported_files(entry_modules: Iterable[str], locate: Callable[[str], Path | None]) -> list[Path]:
    """The files of `entry_modules`, of every module they import directly or not (at module level or inside
    a function) that `locate` finds a file for, and of the packages holding them."""
    seen: set[str] = set()
    todo = list(entry_modules)
    while todo:
        module = todo.pop()
        path = locate(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += _imports(path, module)
        todo += [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]  # its packages
    return sorted({p for m in seen if (p := locate(m)) is not None})


def _module_file(root: Path, module: str) -> Path | None:
    if module != "ferret" and not module.startswith("ferret."):
        return None
    return _source_of(root, module.split(".")[1:])


def _source_of(root: Path, parts: list[str]) -> Path | None:
    """`root/a/b.py` or `root/a/b/__init__.py` for the parts [a, b] of a module name (`root/__init__.py`
    for none)."""
    if not parts:
        return root / "__init__.py"
    relative = Path(*parts)
    for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# The project's files the judge loads for a contract. Not a list kept by hand either: the modules the
# contract's entries name (the reference, which computes golden values, judges fresh cases and timed
# answers; the baseline, the speedup's denominator; the oracle check, run at build; the layout, which arranges
# every drawn case's inputs), the project-local
# modules they import (read from their imports, as for the judge's own source) and the packages holding
# them; and the contract's tolerance file.
def contract_entry_modules(contract: Contract) -> list[str]:
    entries = [
        contract.reference.entry,
        contract.baseline.entry,
        contract.reference.validation.check,
        contract.layout.entry if contract.layout is not None else "",
    ]
    return sorted({entry.partition(":")[0] for entry in entries if entry})


def project_lock(contract_path: Path, contract: Contract, root: Path) -> dict:
    """What a gate records of its project at build time (`GateManifest.project`)."""
    root = root.resolve()
    tolerances = tolerance_file(contract_path)
    record = {
        "root": str(root),
        "entry_modules": contract_entry_modules(contract),
        "tolerance_file": None if tolerances is None else os.path.relpath(tolerances.resolve(), root),
    }
    return {**record, "files": project_source_hashes(record)}


def project_source_hashes(record: dict) -> dict[str, str]:
    """sha256 of each project file the judge loads, by path relative to the project's root: the modules of
    `record["entry_modules"]` that lie inside the root and what they import from inside it, and the
    tolerance file (as it is now: a file gone is left out, and named missing by the verification)."""
    root = Path(record["root"])
    files = project_module_files(record["entry_modules"], root)
    names = [os.path.relpath(path, root) for path in files]
    if record.get("tolerance_file") and (root / record["tolerance_file"]).is_file():
        names.append(record["tolerance_file"])
    return sha256_files(root, sorted(set(names)))


def project_module_files(modules: Iterable[str], root: Path) -> list[Path]:
    """The files of `modules` that lie inside the project `root`, of the project-local modules they import and
    of the packages holding them: what loading them reads from the project (and what its lock covers)."""
    return _imported_files(modules, lambda module: _project_module_file(root, module))


def _project_module_file(root: Path, module: str) -> Path | None:
    """A module's file inside the project; ferret's own modules are the judge's source, locked as such (a
    task that imports one must not pull the CLI or the dispatcher into its gate)."""
    if module == "ferret" or module.startswith("ferret."):
        return None
    return _source_of(root, module.split("."))


# What each source imports, by (module, file, sha256 of its bytes): a file is parsed again only when its
# content changed, so a process that verifies a gate before every candidate parses the judge's source once.
_IMPORTS: dict[tuple[str, str, str], tuple[str, ...]] = {}


def _imports(path: Path, module: str) -> list[str]:
    """The modules `path` imports: `import a.x`, `from a.x import y` (y too, in case it is a module), and
    relative imports, resolved against `module`'s package."""
    source = path.read_bytes()
    key = (module, str(path), hashlib.sha256(source).hexdigest())
    if key not in _IMPORTS:
        _IMPORTS[key] = tuple(_parse_imports(source, path, module))
    return list(_IMPORTS[key])


def _parse_imports(source: bytes, path: Path, module: str) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(parse_module(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return [name for name in found if name]


def canonical_json(data: object) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def gate_hash(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def locked_files(gate_dir: Path) -> list[str]:
    return sorted(
        p.relative_to(gate_dir).as_posix()
        for p in gate_dir.rglob("*")
        if p.is_file()
        and p.relative_to(gate_dir).as_posix() not in UNLOCKED_FILES | {MANIFEST_FILE}
        and p.relative_to(gate_dir).parts[0] not in UNLOCKED_FOLDERS
    )


def verify_gate(gate_dir: str | Path, expected_hash: str | None = None, require_trusted: bool = False) -> dict:
    """Return the manifest of an intact gate; raise GateTampered naming each changed, missing or added file.

    With `require_trusted`, the gate's hash must also be one the test-writer recorded (ferret.gate.trust):
    a gate forged whole is self-consistent, but its hash was never recorded."""
    gate_dir = Path(gate_dir)
    manifest_path = gate_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise GateTampered(gate_dir, [f"{MANIFEST_FILE}: missing"])
    manifest_bytes = manifest_path.read_bytes()
    digest = gate_hash(manifest_bytes)
    problems: list[str] = []
    expected = expected_hash or gate_dir.name
    if digest != expected:
        problems.append(f"{MANIFEST_FILE}: sha256 {digest[:16]}… does not match the gate's hash {expected[:16]}…")
    try:
        manifest = json.loads(manifest_bytes)
        files: dict[str, str] = manifest["files"]
    except (ValueError, KeyError, TypeError):
        raise GateTampered(gate_dir, problems + [f"{MANIFEST_FILE}: unreadable"]) from None
    present = set(locked_files(gate_dir))
    hashed = sha256_files(gate_dir, sorted(present & set(files)))
    for name, want in sorted(files.items()):
        if name not in present:
            problems.append(f"{name}: missing")
        elif hashed[name] != want:
            problems.append(f"{name}: changed (sha256 differs from the lock)")
    for name in sorted(present - set(files)):
        problems.append(f"{name}: added after the gate was locked")
    problems += _judge_source_problems(manifest.get("judge_sources", {}))
    problems += _project_problems(manifest.get("project"))
    if require_trusted and not problems:
        if not is_trusted(digest):
            problems.append(
                f"gate hash {digest[:16]}… was not recorded by the test-writer in {trust_dir()} (built elsewhere, or forged "
                "whole); rebuild it with `ferret gate build`"
            )
    if problems:
        raise GateTampered(gate_dir, problems)
    return manifest


def _judge_source_problems(recorded: dict[str, str]) -> list[str]:
    current = judge_source_hashes()
    problems = []
    for name, want in sorted(recorded.items()):
        have = current.get(name)
        if have is None:
            problems.append(f"judge source {name}: missing")
        elif have != want:
            problems.append(f"judge source {name}: changed since the gate was built")
    for name in sorted(set(current) - set(recorded)):
        problems.append(f"judge source {name}: added since the gate was built")
    return problems


REBUILD = "rebuild the gate with `ferret gate build CONTRACT`"


def _project_problems(record: object) -> list[str]:
    """The project's files the judge loads for this gate's contract, against the sha256 recorded at build."""
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return [f"project files: not recorded (a gate built before the task's files were locked); {REBUILD}"]
    try:
        current = project_source_hashes(record)
    except (OSError, KeyError, TypeError, ValueError, SyntaxError) as err:
        return [f"project files under {record.get('root')}: unreadable ({type(err).__name__}: {err}); {REBUILD}"]
    problems = []
    for name, want in sorted(record["files"].items()):
        have = current.get(name)
        if have is None:
            problems.append(f"project file {name}: missing; {REBUILD}")
        elif have != want:
            problems.append(f"project file {name}: changed since the gate was built; {REBUILD}")
    for name in sorted(set(current) - set(record["files"])):
        problems.append(f"project file {name}: loaded by the judge now but not when the gate was built; {REBUILD}")
    return problems
