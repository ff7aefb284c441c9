"""The audit record is trusted only as the audit wrote it: its digest lives in the trust registry, outside the
gate's folder; the gate's lock leaves the record and the audit's folder out."""

from pathlib import Path

from audit_records import audit_record as _record

from ferret.audit.record import read_audit, write_audit
from ferret.gate.lock import locked_files


def make_gate(gates: Path) -> Path:
    """A gate's folder as the lock sees it: a manifest and one locked file."""
    gate = gates / ("a" * 64)
    (gate / "cases").mkdir(parents=True)
    (gate / "manifest.json").write_text("{}")
    (gate / "cases" / "typical.safetensors").write_bytes(b"golden")
    return gate


def test_a_written_audit_reads_back_and_leaves_the_lock_alone(tmp_path):
    gate = make_gate(tmp_path / "gates")
    locked = locked_files(gate)
    write_audit(gate, _record(gate.name))
    (gate / "audit" / "abc").mkdir(parents=True)
    (gate / "audit" / "abc" / "classified.jsonl").write_text("{}\n")
    assert locked_files(gate) == locked  # audit.json and audit/ are outside the lock: the gate is not tampered
    trusted = read_audit(gate)
    assert trusted.problem is None and trusted.record is not None and trusted.record.mutation_score == 0.9


def test_an_edited_audit_is_not_trusted(tmp_path):
    gate = make_gate(tmp_path / "gates")
    path = write_audit(gate, _record(gate.name, score=0.5))
    path.write_text(path.read_text().replace('"mutation_score": 0.5', '"mutation_score": 1.0'))
    trusted = read_audit(gate)
    assert trusted.record is None and trusted.problem is not None and "changed since the audit wrote it" in trusted.problem


def test_an_audit_the_registry_never_saw_is_not_trusted(tmp_path):
    gate = tmp_path / ("f" * 64)  # a gate hash the audit never recorded a digest for
    gate.mkdir()
    assert "no audit of gate" in (read_audit(gate).problem or "")
    (gate / "audit.json").write_text(_record(gate.name).model_dump_json())
    trusted = read_audit(gate)
    assert trusted.record is None and "no digest of it in the trust registry" in (trusted.problem or "")
