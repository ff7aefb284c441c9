"""The audit record is trusted only as the audit wrote it: its digest lives in the trust registry, outside the
gate's folder; the gate's lock leaves the record and the audit's folder out; `ferret report` shows it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reporting"))
from report_fixtures import make_gate  # noqa: E402

from ferret.audit.models import AuditRecord, OperatorScore, Survivor  # noqa: E402
from ferret.audit.record import read_audit, write_audit  # noqa: E402
from ferret.gate.lock import locked_files  # noqa: E402
from ferret.reporting import write_report  # noqa: E402


def _record(gate_hash: str, score: float = 0.9) -> AuditRecord:
    from ferret.audit.models import Mutant

    survivor = Mutant(id="constant-0007a-eps", operator="constant", line=12, description="eps * 2", diff="-a\n+b")
    return AuditRecord(
        gate_hash=gate_hash,
        op="rmsnorm",
        profile="cpu",
        contract="contracts/rmsnorm.yaml",
        candidate="tasks/rmsnorm/candidates/triton_rmsnorm.py",
        candidate_sha256="0" * 64,
        operators=["constant"],
        seed=1,
        budget=10,
        independent_cases=20,
        started_at="2026-12-07T00:00:00+00:00",
        seconds=1.0,
        mutants=10,
        harmful=10,
        killed=9,
        benign=0,
        band=0,
        stillborn=0,
        mutation_score=score,
        honest_checks=2,
        honest_false_rejections=0,
        honest_false_rejection_rate=0.0,
        per_operator=[OperatorScore(operator="constant", mutants=10, harmful=10, killed=9, mutation_score=0.9)],
        survivors=[Survivor(mutant=survivor, error=None, why="over the tolerance on round1_fresh3")],
    )


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


def test_the_gate_report_shows_the_audit_and_its_survivors(tmp_path):
    gate = make_gate(tmp_path / "gates")
    write_audit(gate, _record(gate.name))
    markdown = write_report(gate).markdown.read_text()
    assert "## Audit" in markdown and "Mutation score **0.9**" in markdown
    assert "| constant | 10 | 10 | 9 | 0.9 |" in markdown
    assert "constant-0007a-eps" in markdown and "round1\\_fresh3" in markdown
