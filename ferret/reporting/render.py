"""`ferret report`: a gate's folder or a run's folder read through their typed records and written as one
self-contained HTML page (inline CSS, inline SVG, no script, nothing fetched) and a Markdown summary.

Everything a candidate wrote (its path, kernel names, detection evidence, proposal notes, review text) is
text to show, never markup: the HTML template escapes every value (autoescape), the Markdown one passes
each through `_markdown_text`."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from pydantic import BaseModel

from ferret.audit.record import read_audit
from ferret.dispatch.runlog import RunLog
from ferret.errors import UsageError
from ferret.gate.lock import MANIFEST_FILE, REPORT_FILE
from ferret.gate.models import GateManifest, Verdict
from ferret.gate.report import read_report, read_verdict
from ferret.reporting import charts
from ferret.reporting.views import GateView, RunView, gate_view, run_relative, run_view

Record = TypeVar("Record", bound=BaseModel)
HTML_FILE, MARKDOWN_FILE = "report.html", "report.md"
RUN_FILE = "run.json"
# A gate's index holds up to 500 verdicts; the page shows the newest this many whole, the rest as index rows.
VERDICTS_SHOWN = 20


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path


def write_report(folder: Path, out: Path | None = None, gates_dir: Path = Path("gates")) -> ReportFiles:
    """Render the report of `folder` (gates/<hash> or runs/<id>) into `out`; by default a run's goes into
    its folder and a gate's beside it (`default_out`). `gates_dir` is where a run's gate is looked for, to
    show its candidates' whole verdicts."""
    kind = folder_kind(folder)
    if kind == "run":
        context = {"run": load_run(folder, gates_dir), "gate": None}
    else:
        context = {"run": None, "gate": load_gate(folder)}
    target = out or default_out(folder, kind)
    if kind == "gate" and target.resolve().is_relative_to(folder.resolve()):
        raise UsageError(
            f"--out {target} is inside the gate {folder}: a gate's folder is locked (a file added there "
            f"makes it tampered); leave --out out to write beside it, in {default_out(folder, kind)}"
        )
    target.mkdir(parents=True, exist_ok=True)
    environment = _environment()
    files = ReportFiles(html=target / HTML_FILE, markdown=target / MARKDOWN_FILE)
    files.html.write_text(environment.get_template("report.html.j2").render(**context))
    markdown = environment.get_template("report.md.j2").render(**context)
    # The template's blocks leave runs of blank lines; one blank line is all Markdown needs between blocks.
    files.markdown.write_text(re.sub(r"\n{3,}", "\n\n", markdown))
    return files


def default_out(folder: Path, kind: str) -> Path:
    """Where the report goes unless told: a run's folder itself; for a gate, `gates/<hash>.report/` beside
    it (as its input cache is `gates/<hash>.cache/`), since every file inside a gate's folder is locked."""
    if kind != "gate":
        return folder
    named = folder if folder.name else folder.resolve()  # `ferret report .` from inside the gate
    return named.with_name(named.name + ".report")


def folder_kind(folder: Path) -> str:
    """`run` (it holds run.json) or `gate` (a manifest or a report.json); anything else is the user's mistake."""
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder: `ferret report` takes gates/<hash> or runs/<id>")
    if (folder / RUN_FILE).is_file():
        return "run"
    if (folder / MANIFEST_FILE).is_file() or (folder / REPORT_FILE).is_file():
        return "gate"
    raise UsageError(
        f"{folder} is neither a gate (no {MANIFEST_FILE} nor {REPORT_FILE}) nor a run (no {RUN_FILE}): "
        "`ferret report` takes gates/<hash> or runs/<id>"
    )


def _validated(path: Path, model: type[Record], what: str) -> Record:
    """The record in `path`, validated; a file that does not fit is the user's mistake, named."""
    try:
        return model.model_validate_json(path.read_bytes())
    except ValueError as err:
        raise UsageError(f"{path} is not a readable {what}: {str(err).splitlines()[0]}") from err


def load_gate(folder: Path) -> GateView:
    manifest_path = folder / MANIFEST_FILE
    manifest = _validated(manifest_path, GateManifest, "gate manifest") if manifest_path.is_file() else None
    report = read_report(folder)
    shown = report.verdicts[-VERDICTS_SHOWN:]
    verdicts = [(entry, read_verdict(folder, entry)) for entry in shown]
    validation = json.dumps(report.reference_validation, sort_keys=True) if report.reference_validation else ""
    trusted = read_audit(folder)
    audit = (trusted.record, trusted.problem or "")
    return gate_view(folder.name, manifest, report.verdicts, report.verdict_count, verdicts, validation, audit)


def _gate_verdicts(gates_dir: Path, log: RunLog) -> dict[str, Verdict]:
    """The whole verdicts of the run's candidates in its gate, by sha256, where the gate is here. The oldest
    of each is the round's own: the final check judges the winner again and appends a later one."""
    gate = gates_dir / log.gate_hash if log.gate_hash else None
    if gate is None or not (gate / REPORT_FILE).is_file():
        return {}
    wanted = {c.sha256 for r in log.rounds for c in r.candidates}
    found: dict[str, Verdict] = {}
    for entry in read_report(gate).verdicts:
        if entry.candidate_sha256 in wanted and entry.candidate_sha256 not in found:
            found[entry.candidate_sha256] = read_verdict(gate, entry)
    return found


def load_run(folder: Path, gates_dir: Path) -> RunView:
    log = _validated(folder / RUN_FILE, RunLog, "run log")
    final = None
    relative = run_relative(log.best.file, folder) if log.best is not None else None
    if relative is not None:  # the final check's whole verdict, written beside the candidate (--verdict-out)
        final_file = folder / relative.with_name(relative.stem + ".final-verdict.json")
        final = _validated(final_file, Verdict, "verdict") if final_file.is_file() else None
    return run_view(log, folder, _gate_verdicts(gates_dir, log), final)


# --- formatting ------------------------------------------------------------------------------------------------


def _number(value: float | None, digits: int = 3) -> str:
    """A metric as a reader wants it: 3 significant digits, '-' where there is none."""
    if value is None:
        return "-"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.{digits}g}"


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#])")


def _markdown_text(value: object) -> str:
    """Text for a Markdown table cell or line: one line, Markdown's and HTML's special characters escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def _environment() -> Environment:
    environment = Environment(
        loader=PackageLoader("ferret.reporting", "templates"),
        undefined=StrictUndefined,
        autoescape=select_autoescape(enabled_extensions=("html.j2",), disabled_extensions=("md.j2",), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(num=_number, md=_markdown_text)
    environment.globals.update(stage_chart=charts.stage_chart, timing_chart=charts.timing_chart, floor_chart=charts.floor_chart)
    return environment
