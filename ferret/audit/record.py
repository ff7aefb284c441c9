"""`gates/<hash>/audit.json`, written and read back. The file sits outside the gate's lock, where anyone may edit
it, so its sha256 is recorded in the trust registry when the audit writes it (`ferret.gate.trust.record_audit`),
and every reader that trusts the score (`ferret dispatch`, `ferret report`) checks the file against that digest."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ferret.audit.models import AuditRecord
from ferret.gate.lock import AUDIT_FILE
from ferret.gate.trust import audit_digest, record_audit


def write_audit(gate: Path, record: AuditRecord) -> Path:
    """Replace the gate's audit record atomically and record its digest where the lock's trust lives."""
    data = record.model_dump_json(indent=1).encode()
    tmp = gate / (AUDIT_FILE + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, gate / AUDIT_FILE)
    record_audit(gate.name, hashlib.sha256(data).hexdigest())
    return gate / AUDIT_FILE


@dataclass(frozen=True)
class TrustedAudit:
    """The gate's audit record if there is one the audit wrote and nobody changed since; else why not."""

    record: AuditRecord | None
    problem: str | None = None


def read_audit(gate: Path) -> TrustedAudit:
    path = gate / AUDIT_FILE
    if not path.is_file():
        return TrustedAudit(None, f"no audit of gate {gate.name[:16]}… (run `ferret gate audit`)")
    data = path.read_bytes()
    recorded = audit_digest(gate.name)
    if recorded is None:
        return TrustedAudit(None, f"{path}: no digest of it in the trust registry (not written by `ferret gate audit` here)")
    if hashlib.sha256(data).hexdigest() != recorded:
        return TrustedAudit(None, f"{path}: changed since the audit wrote it (sha256 differs from the trust registry's)")
    try:
        record = AuditRecord.model_validate_json(data)
    except ValidationError as err:
        return TrustedAudit(None, f"{path}: not an audit record ({err.error_count()} errors)")
    if record.gate_hash != gate.name:
        return TrustedAudit(None, f"{path}: the audit of another gate ({record.gate_hash[:16]}…)")
    return TrustedAudit(record)
