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
# A gate's audit record (gates/<hash>/audit.json) is outside the lock, so anyone could edit it: the digest of the
# one the audit wrote is kept here, and whatever trusts an audit's score checks the file against it.
AUDITS_FILE = "trusted_audits.json"


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


def _write_json_locked(name: str, update) -> None:
    folder = trust_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(folder / (name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / name
        try:
            current = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            current = {}
        current = current if isinstance(current, dict) else {}
        update(current)
        tmp = folder / (name + ".tmp")
        tmp.write_text(json.dumps(current, indent=1, sort_keys=True))
        os.replace(tmp, path)


def record_audit(gate_hash: str, sha256: str) -> None:
    """The digest of the audit record the audit itself wrote for this gate (the latest one counts)."""
    _write_json_locked(AUDITS_FILE, lambda registry: registry.__setitem__(gate_hash, sha256))


def audit_digest(gate_hash: str) -> str | None:
    """The recorded digest of this gate's audit record, or None if no audit was recorded."""
    path = trust_dir() / AUDITS_FILE
    try:
        registry = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return None  # an unreadable registry trusts no audit
    digest = registry.get(gate_hash) if isinstance(registry, dict) else None
    return digest if isinstance(digest, str) else None


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
    passing_verdicts()  # a record that is not a JSON object is refused, never written over
    _write_json_locked(PASSES_FILE, lambda record: record.__setitem__(f"{gate_hash}:{candidate_sha256}", info))


def recorded_pass(gate_hash: str, candidate_sha256: str) -> dict | None:
    """What the judge recorded when this candidate passed this gate, or None if it never did."""
    return passing_verdicts().get(f"{gate_hash}:{candidate_sha256}")
