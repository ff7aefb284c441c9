"""A gate (or the audit's cases) on a worker that is not the auditor's process, perhaps not its host.

The auditor verified its gate against its own trust registry; a worker accepts a gate only if its manifest hashes to
that same trusted hash and every locked file matches the manifest (`ferret.gate.lock.verify_gate`). The worker's own
registry is no authority here: a gate forged whole is consistent with itself, so a worker checking a gate only
against itself would accept it. Where the worker's host lacks the gate, the auditor's files travel (`Files`) and are
verified the same way before anything is judged by them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferret.errors import GateTampered
from ferret.gate.lock import MANIFEST_FILE, locked_files, verify_gate
from ferret.gate.trust import is_trusted, record_gate


@dataclass(frozen=True)
class Files:
    """A folder's files by path relative to it: what a host without the folder needs to write it."""

    files: dict[str, bytes]


def files_of(folder: Path, names: list[str] | None = None) -> Files:
    """`names` of `folder` (default: every file under it)."""
    names = names if names is not None else sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return Files({name: (folder / name).read_bytes() for name in names})


def gate_files(gate: Path) -> Files:
    """The gate's manifest and every file it locks (not its report, verdicts or audit: they are outside the lock)."""
    return files_of(gate, [MANIFEST_FILE, *locked_files(gate)])


def write_files(files: Files, folder: Path) -> None:
    """`files` as `folder`, written beside it and renamed into place, so a folder that exists is whole (a worker that
    dies while writing leaves only the staging folder)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    for name, data in files.files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    try:
        os.rename(staging, folder)
    except OSError:
        if not folder.is_dir():  # another worker of this host wrote it first: theirs is verified like any other
            raise


def accept_gate(gates_dir: Path, trusted_hash: str, fetch: Callable[[], Files]) -> Path:
    """The gate `trusted_hash` under `gates_dir`, written from `fetch()` if this host lacks it; GateTampered naming
    the trusted hash unless every byte matches it. An accepted gate is recorded in this host's trust registry, so
    that the judge here finds and trusts it as the auditor does."""
    folder = gates_dir / trusted_hash
    if not (folder / MANIFEST_FILE).is_file():
        write_files(fetch(), folder)
    try:
        manifest = verify_gate(folder, expected_hash=trusted_hash)
    except GateTampered as err:
        raise GateTampered(
            folder, [f"refused: the auditor trusts gate {trusted_hash}; this worker's copy does not match it", *err.problems]
        ) from None
    if not is_trusted(trusted_hash):
        info = {k: manifest.get(k) for k in ("op", "profile", "build_key")}
        record_gate(trusted_hash, {**info, "folder": str(folder.resolve()), "accepted": "matched the auditor's trusted hash"})
    return folder
