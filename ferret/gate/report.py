"""A gate's record of verdicts, outside its lock: `gates/<hash>/report.json`, a bounded index (one short
summary per verdict, the newest `Report.INDEX_LIMIT`), and every verdict whole in its own file,
`gates/<hash>/verdicts/<index>.json`, which stays when its summary leaves the index.

A report of schema 1 (every verdict inline, as written before) is still read; the next append rewrites it
as schema 2, its verdicts moved to their own files."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ferret.gate.lock import MANIFEST_FILE, REPORT_FILE, VERDICTS_FOLDER
from ferret.gate.models import Report, ReportEntry, ReportV1, Verdict


def append_verdict(gate_dir: Path, verdict: Verdict) -> Path:
    """Write `verdict` to its own file and its summary to the index; returns the index's path."""
    path = gate_dir / REPORT_FILE
    with open(gate_dir / (REPORT_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report, inline = _read_any(gate_dir)
        for old in inline:  # a schema-1 report's verdicts, moved to their own files once
            _write_verdict(gate_dir, report, old)
        _write_verdict(gate_dir, report, verdict)
        _write_atomically(path, report.model_dump_json(indent=1))
    return path


def read_report(gate_dir: str | os.PathLike[str]) -> Report:
    """The index (schema 2), whatever schema the file on disk has, of the gate folder `gate_dir` (gates/<hash>)."""
    return _read_any(Path(gate_dir))[0]


def read_verdict(gate_dir: str | os.PathLike[str], summary: ReportEntry) -> Verdict:
    """The whole verdict behind one entry of the index."""
    gate_dir = Path(gate_dir)
    if summary.file is None:
        return _read_any(gate_dir)[1][summary.index]
    return Verdict.model_validate_json((gate_dir / summary.file).read_text())


def read_verdicts(gate_dir: str | os.PathLike[str]) -> list[Verdict]:
    """Every verdict in the index, whole, oldest first."""
    gate_dir = Path(gate_dir)
    report, inline = _read_any(gate_dir)
    if inline:
        return inline
    return [read_verdict(gate_dir, summary) for summary in report.verdicts]


def _read_any(gate_dir: Path) -> tuple[Report, list[Verdict]]:
    """(the index, the verdicts a schema-1 file holds inline: empty for schema 2)."""
    path = gate_dir / REPORT_FILE
    if not path.exists():
        manifest = json.loads((gate_dir / MANIFEST_FILE).read_text()) if (gate_dir / MANIFEST_FILE).exists() else {}
        return Report(gate_hash=gate_dir.name, reference_validation=manifest.get("validation", {})), []
    data = json.loads(path.read_text())
    if data.get("schema_version", 1) == 1:
        old = ReportV1.model_validate(data)
        summaries = [ReportEntry.of(v, index, None) for index, v in enumerate(old.verdicts)]
        report = Report(
            gate_hash=old.gate_hash,
            reference_validation=old.reference_validation,
            verdict_count=len(summaries),
            verdicts=summaries,
        )
        return report, old.verdicts
    return Report.model_validate(data), []


def _write_verdict(gate_dir: Path, report: Report, verdict: Verdict) -> None:
    # Entries still pointing inline (a schema-1 report being rewritten) are replaced in order.
    pending = [s for s in report.verdicts if s.file is None]
    if pending:
        index = pending[0].index
        report.verdicts.remove(pending[0])
    else:
        index = report.verdict_count
    relative = f"{VERDICTS_FOLDER}/{index:06d}.json"
    (gate_dir / VERDICTS_FOLDER).mkdir(exist_ok=True)
    _write_atomically(gate_dir / relative, verdict.model_dump_json(indent=1))
    report.verdicts.append(ReportEntry.of(verdict, index, relative))
    report.verdicts.sort(key=lambda s: s.index)
    report.verdict_count = max(report.verdict_count, index + 1)
    del report.verdicts[: max(0, len(report.verdicts) - Report.INDEX_LIMIT)]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
