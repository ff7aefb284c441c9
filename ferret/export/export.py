"""`ferret export`: an accepted kernel as an importable package that registers it as a torch.library op.

Export packages only a file that passed the current gate. The pass is read from where the gates' trust lives
(`ferret.gate.trust`, written by the judge after a passing verdict), never from gates/<hash>/verdicts/ (outside
the lock, editable); with no pass on record the check runs here, on the very bytes that will be packaged.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ferret import __version__
from ferret.backends.registry import backend_for
from ferret.contract.task import Task
from ferret.errors import JudgeError, UsageError
from ferret.export.models import CPU_PROFILE_NOTE, ExportManifest
from ferret.export.package import write_package
from ferret.export.signature import op_arguments, schema
from ferret.gate.judge import Judge, device_for, require_language
from ferret.gate.lock import sha256_file
from ferret.gate.models import Verdict
from ferret.gate.platform_info import default_profile, resolve_profile
from ferret.gate.trust import recorded_pass
from ferret.progress import ProgressLike, Reporter, as_reporter

GPU_PROFILE_NOTE = "judged on the GPU profile: correctness at production shapes on a GPU"


@dataclass(frozen=True)
class Exported:
    folder: Path
    manifest: ExportManifest


def _why_failed(verdict: Verdict) -> str:
    failing = [name for name, part in verdict.parts.items() if part.status == "fail"]
    seen = sorted({d.cheat for d in verdict.detections})
    stage = f", first failing stage {verdict.first_failing_stage}" if verdict.first_failing_stage else ""
    return f"failing parts {failing or 'none'}{stage}, detections {seen or 'none'}"


def establish_pass(judge: Judge, candidate: Path, sha256: str, progress: Reporter) -> tuple[dict, bool]:
    """(the judge's record of this file passing the current gate, whether it was checked here). Refuses
    (UsageError) a file that fails the gate."""
    record = recorded_pass(judge.gate.name, sha256)
    if record is not None:
        progress(f"pass on record: {sha256[:16]}… against gate {judge.gate.name[:16]}… ({record.get('started_at')})")
        return record, False
    progress(f"no pass of {sha256[:16]}… on record for gate {judge.gate.name[:16]}…: checking it now")
    verdict = judge.check(candidate)
    if not verdict.passed:
        raise UsageError(f"{candidate.name} fails gate {judge.gate.name}: {_why_failed(verdict)}; export refused")
    record = recorded_pass(judge.gate.name, sha256)
    if record is None or verdict.candidate_sha256 != sha256:
        raise JudgeError(f"the gate passed {candidate.name} but no pass of sha256 {sha256} was recorded")
    return record, True


def export_candidate(
    contract_path: str | Path,
    candidate: str | Path,
    out: str | Path,
    gates_dir: str | Path = "gates",
    profile: str | None = None,
    progress: ProgressLike = None,
) -> Exported:
    """Export `candidate` as `<out>/ferret_<op>/`. UsageError for a missing file, a language the contract refuses
    or a failing candidate; ContractError for a contract that cannot be an op; both exit 2 on the command line."""
    reporter = as_reporter(progress)
    candidate = Path(candidate)
    if not candidate.is_file():
        raise UsageError(f"{candidate}: no such candidate file")
    task = Task.load(contract_path)
    arguments = op_arguments(task.contract)
    name = resolve_profile(profile, needs_gpu=False) if profile else default_profile()
    require_language(task, device_for(name), name, candidate)
    with tempfile.TemporaryDirectory(prefix="ferret-export-") as tmp:
        # The bytes checked are the bytes packaged: a copy taken once, hashed, judged and written.
        judged = Path(tmp) / candidate.name
        shutil.copyfile(candidate, judged)
        sha256 = sha256_file(judged)
        judge = Judge(task, gates_dir, name, reporter)
        record, checked = establish_pass(judge, judged, sha256, reporter)
        manifest = ExportManifest.model_validate(
            {
                "op": task.contract.op,
                "op_name": f"ferret::{task.contract.op}",
                "schema": schema(arguments),
                "arguments": arguments,
                "dtypes": list(task.contract.dtypes),
                "params": dict(task.contract.params),
                "gate_hash": judge.gate.name,
                "candidate_sha256": sha256,
                "candidate_language": backend_for(judged.read_text()).name,
                "profile": judge.profile,
                "verdict_note": CPU_PROFILE_NOTE if judge.profile == "cpu" else GPU_PROFILE_NOTE,
                "pass_recorded": record,
                "checked_at_export": checked,
                "contract_sha256": judge.manifest.contract_sha256,
                "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "ferret_version": __version__,
            }
        )
        folder = write_package(manifest, judged, Path(out))
    reporter(f"exported {manifest.op_name} to {folder}")
    return Exported(folder, manifest)
