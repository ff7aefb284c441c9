"""`ferret report`'s rendering (ferret/reporting/render.py): the Markdown summary of a gate and of a run
against snapshots, candidate text escaped in both outputs, the HTML self-contained, and a folder that is
neither a gate nor a run refused naming it.

The snapshots are rewritten with FERRET_UPDATE_SNAPSHOTS=1 (then read the diff before committing it)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_records import audit_record  # noqa: E402
from report_fixtures import EVIL, make_gate, make_run  # noqa: E402

from ferret.audit.record import write_audit  # noqa: E402
from ferret.errors import UsageError  # noqa: E402
from ferret.gate.lock import locked_files  # noqa: E402
from ferret.reporting import folder_kind, write_report  # noqa: E402

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


@pytest.fixture
def folders(tmp_path):
    gates = tmp_path / "gates"
    return make_gate(gates), make_run(tmp_path / "runs"), gates


def _matches_snapshot(text: str, name: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("FERRET_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed: rerun with FERRET_UPDATE_SNAPSHOTS=1 and review the diff"


def test_the_gate_summary_matches_its_snapshot(folders):
    gate, _, _ = folders
    locked = locked_files(gate)
    files = write_report(gate)
    # Beside the gate, never in it: every file added to a gate's folder would make it tampered.
    beside = gate.with_name(gate.name + ".report")
    assert (files.html, files.markdown) == (beside / "report.html", beside / "report.md")
    assert locked_files(gate) == locked
    _matches_snapshot(files.markdown.read_text(), "gate.md")


def test_a_report_is_never_written_into_the_gate(folders):
    gate, _, _ = folders
    with pytest.raises(UsageError, match="is inside the gate"):
        write_report(gate, out=gate / "reports")
    assert not (gate / "reports").exists()


def test_the_run_summary_matches_its_snapshot(folders, tmp_path):
    _, run, gates = folders
    files = write_report(run, out=tmp_path / "out", gates_dir=gates)
    assert files.markdown == tmp_path / "out" / "report.md" and not (run / "report.md").exists()
    _matches_snapshot(files.markdown.read_text(), "run.md")


def test_a_run_whose_gate_is_not_here_is_shown_from_its_log_in_brief(folders, tmp_path):
    _, run, _ = folders
    text = write_report(run, gates_dir=tmp_path / "elsewhere").markdown.read_text()
    assert "(from the run log's verdict in brief)" in text
    assert "first failing stage: **y**" in text and "Winner: round 1, candidate 0" in text


@pytest.mark.quick
def test_candidate_text_is_escaped_in_both_outputs(folders):
    _, run, gates = folders
    files = write_report(run, gates_dir=gates)
    html, markdown = files.html.read_text(), files.markdown.read_text()
    assert EVIL not in html and EVIL not in markdown
    assert "&lt;script&gt;fetch(" in html
    assert r"\<script\>fetch(" in markdown


@pytest.mark.parametrize("which", ["gate", "run"])
def test_the_page_names_nothing_to_load(folders, which):
    gate, run, gates = folders
    html = write_report(gate if which == "gate" else run, gates_dir=gates).html.read_text()
    # No script, no stylesheet or image to fetch, no link: only inline CSS and inline SVG.
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", html, re.IGNORECASE)
    # (Candidate text holding `src="..."` is escaped: its quotes are &#34;, so it is no attribute.)
    assert not re.search(r"\b(src|href)\s*=\s*[\"']|url\(|@import", html, re.IGNORECASE)
    assert "<svg" in html and "default-src 'none'" in html


def test_a_folder_that_is_neither_a_gate_nor_a_run_is_refused_naming_it(tmp_path):
    with pytest.raises(UsageError, match=re.escape(str(tmp_path)) + " is neither a gate"):
        folder_kind(tmp_path)
    with pytest.raises(UsageError, match="is not a folder"):
        write_report(tmp_path / "missing")


def test_a_run_log_that_does_not_read_is_a_usage_error_naming_it(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(UsageError, match=re.escape(str(tmp_path / "run.json")) + " is not a readable run log"):
        write_report(tmp_path)


def test_a_run_resumed_under_another_gate_names_the_earlier_gate_in_both_outputs(folders, tmp_path):
    from ferret.dispatch.runlog import RunLog

    _, run, gates = folders
    log = RunLog.model_validate_json((run / "run.json").read_text())
    earlier = "ab" * 32
    (run / "run.json").write_text(log.model_copy(update={"earlier_gates": [earlier]}).model_dump_json(by_alias=True))
    files = write_report(run, out=tmp_path / "out", gates_dir=gates)
    assert (
        f"gate `{log.gate_hash[:16]}` (earlier rounds under `{earlier[:16]}`: the gate changed when the run was resumed)"
    ) in files.markdown.read_text()
    assert f"earlier rounds under {earlier} (the gate changed when the run was resumed)" in files.html.read_text()


@pytest.mark.parametrize(("exit_code", "shown"), [(None, "NO VERDICT</span> (not run)"), (4, "NO VERDICT</span> (exit 4)")])
def test_a_final_check_without_a_verdict_is_shown_as_such_not_as_a_failure(folders, tmp_path, exit_code, shown):
    """A final check not run (the best's file not in the run folder as judged) or ended without a verdict (the
    judge's own failure) says nothing of the candidate: the page says NO VERDICT and why, never FAIL."""
    from ferret.dispatch.runlog import FinalCheck, RunLog

    _, run, gates = folders
    log = RunLog.model_validate_json((run / "run.json").read_text())
    final = FinalCheck(passed=False, exit_code=exit_code, error="round-01/candidate-1.py: no such candidate file")
    (run / "run.json").write_text(log.model_copy(update={"final_check": final}).model_dump_json(by_alias=True))
    html = write_report(run, out=tmp_path / "out", gates_dir=gates).html.read_text()
    line = next(line for line in html.splitlines() if "Final acceptance check" in line)
    assert f'Final acceptance check (fresh process, fresh cases): <span class="fail">{shown}: ' in line
    assert line.endswith("round-01/candidate-1.py: no such candidate file</p>") and "FAIL" not in line


def test_the_gate_report_shows_the_audit_and_its_survivors(tmp_path):
    gate = make_gate(tmp_path / "gates")
    write_audit(gate, audit_record(gate.name))
    markdown = write_report(gate).markdown.read_text()
    assert "## Audit" in markdown and "Mutation score **0.9**" in markdown
    assert "| constant | 10 | 10 | 9 | 0.9 |" in markdown
    assert "constant-0007a-eps" in markdown and "round1\\_fresh3" in markdown
