"""Appending verdicts to `gates/<hash>/report.json`, the only file of a gate outside its lock."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ferret.gate.lock import MANIFEST_FILE, REPORT_FILE
from ferret.gate.models import Report, Verdict


def append_verdict(gate_dir: Path, verdict: Verdict) -> Path:
    path = gate_dir / REPORT_FILE
    with open(gate_dir / (REPORT_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report = read_report(gate_dir)
        report.verdicts.append(verdict)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(report.model_dump_json(indent=1))
        os.replace(tmp, path)
    return path


def read_report(gate_dir: Path) -> Report:
    path = gate_dir / REPORT_FILE
    if not path.exists():
        manifest = json.loads((gate_dir / MANIFEST_FILE).read_text()) if (gate_dir / MANIFEST_FILE).exists() else {}
        return Report(gate_hash=gate_dir.name, reference_validation=manifest.get("validation", {}))
    return Report.model_validate(json.loads(path.read_text()))
