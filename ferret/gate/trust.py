"""Where gate digests are kept: outside the repository and outside any candidate's reach.

The test-writer records each gate it locks here; the judge refuses a gate whose hash is not recorded.
A gate folder forged whole (files, manifest and folder name all consistent) therefore still fails:
its hash was never written by the test-writer. The folder is hidden from candidate processes (a
private mount namespace, where the system allows one); `FERRET_TRUST_DIR` moves it.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ferret.errors import GateTampered
from ferret.private_folders import trust_dir

REGISTRY_FILE = "trusted_gates.json"


def _registry_path() -> Path:
    return trust_dir() / REGISTRY_FILE


def trusted_gates() -> dict[str, dict]:
    path = _registry_path()
    if not path.exists():
        return {}
    try:
        registry = json.loads(path.read_text())
    except ValueError as err:
        registry = err
    if not isinstance(registry, dict):
        # Read as empty, every gate would be untrusted and the next record would overwrite the rest.
        raise GateTampered(
            path.parent,
            [
                f"the trust registry {path} is not a JSON object of gate hashes ({registry}); "
                "restore it, or remove it and rebuild the gates"
            ],
        )
    return registry


def record_gate(gate_hash: str, info: dict) -> None:
    folder = trust_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(folder / (REGISTRY_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        registry = trusted_gates()
        registry[gate_hash] = info
        tmp = folder / (REGISTRY_FILE + ".tmp")
        tmp.write_text(json.dumps(registry, indent=1, sort_keys=True))
        os.replace(tmp, folder / REGISTRY_FILE)


def is_trusted(gate_hash: str) -> bool:
    return gate_hash in trusted_gates()


# Passing verdicts, by gate and candidate: what `ferret export` needs before it packages a kernel. Kept here and not
# read from gates/<hash>/verdicts/, which are outside the lock and anyone may edit.
PASSES_FILE = "passing_verdicts.json"


def _passes_path() -> Path:
    return trust_dir() / PASSES_FILE


def passing_verdicts() -> dict[str, dict]:
    """`<gate hash>:<candidate sha256>` -> what the judge recorded when that candidate passed that gate."""
    path = _passes_path()
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        record = err
    if not isinstance(record, dict):
        raise GateTampered(path.parent, [f"the record of passing verdicts {path} is not a JSON object ({record}); remove it"])
    return record


def record_pass(gate_hash: str, candidate_sha256: str, info: dict) -> None:
    """Written by the judge after a passing verdict, never by anything a candidate runs in."""
    folder = trust_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(folder / (PASSES_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = passing_verdicts()
        record[f"{gate_hash}:{candidate_sha256}"] = info
        tmp = folder / (PASSES_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(tmp, folder / PASSES_FILE)


def recorded_pass(gate_hash: str, candidate_sha256: str) -> dict | None:
    """What the judge recorded when this candidate passed this gate, or None if it never did."""
    return passing_verdicts().get(f"{gate_hash}:{candidate_sha256}")
