"""A baseline that imports the project's other modules is timed: the reference timer gets a copy of every project
file the baseline loads (the files the gate's lock covers for it) and imports its module from that copy, never
from a `tasks` package that happens to be installed on the machine.

The paged MLA baseline imports the contiguous one and the paged layout. On the H200 (2026-12-01) its reference
timer, which then got the baseline's one file, died on `No module named 'tasks'` in every check, and the check
reported no speed at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ferret import wire
from ferret.contract.task import Task
from ferret.gate.context import GateContext
from ferret.gate.judge import locate_gate
from ferret.gate.lock import project_module_files, verify_gate
from ferret.gate.models import GateManifest
from ferret.gate.timing import TimingOptions, _copy_baseline, time_candidate

REPO = Path(__file__).resolve().parents[2]
PAGED = REPO / "contracts" / "mla_attention_paged.yaml"
PAGED_CANDIDATE = REPO / "tasks" / "mla_attention_paged" / "candidates" / "triton_mla_paged.py"


def test_the_reference_timer_copies_what_the_baseline_imports_from_the_project(tmp_path):
    task = Task.load(PAGED)
    loaded, root, copies = _copy_baseline(task, tmp_path)
    assert root is not None
    assert root == tmp_path / "project" and loaded == root / "tasks" / "mla_attention_paged" / "baseline.py"
    copied = {str(c.relative_to(root)) for c in copies}
    assert {
        "tasks/__init__.py",
        "tasks/mla_attention/baseline.py",
        "tasks/mla_attention_paged/layout.py",
        "tasks/mla_attention_paged/baseline.py",
    } <= copied
    # exactly the files the gate's lock hashes for the baseline: nothing unlocked travels, nothing locked is missing
    locked = project_module_files(["tasks.mla_attention_paged.baseline"], task.project_root.resolve())
    assert copied == {str(p.relative_to(task.project_root.resolve())) for p in locked}
    assert not any("candidates" in name for name in copied)
    for copy in copies:
        assert copy.read_bytes() == (task.project_root / copy.relative_to(root)).read_bytes()


def test_the_copy_is_imported_before_an_installed_tasks_package(tmp_path):
    task = Task.load(PAGED)
    loaded, root, _ = _copy_baseline(task, tmp_path / "reference")
    decoy = tmp_path / "site" / "tasks"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the installed decoy tasks package was imported')\n")
    job = wire.TimingJob(
        role=wire.REFERENCE_TIMER,
        source=str(loaded),
        entry="run",
        compile=False,
        device="cpu",
        params={},
        read_only=[],
        repeats=1,
        cases=[],
        result="",
        import_root=str(root),
        module="tasks.mla_attention_paged.baseline",
    )
    script = (
        "import inspect, json, sys; from ferret import wire; from ferret.bench.process import load_baseline; "
        "fn = load_baseline(wire.TimingJob.read(__import__('pathlib').Path(sys.argv[1]))); "
        "imported = sys.modules['tasks.mla_attention.baseline']; "
        "print(json.dumps([inspect.getsourcefile(fn), inspect.getsourcefile(imported)]))"
    )
    job.write(tmp_path / "job.json")
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{REPO}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sources = json.loads(done.stdout)
    assert sources == [str(loaded), str(root / "tasks" / "mla_attention" / "baseline.py")]


def test_the_paged_baseline_is_timed_in_its_own_process(tmp_path):
    """The whole timing path on the CPU rehearsal: both processes start, the reference loads the paged baseline
    and its imports, and every step runs (it failed before step '0 0' when the baseline was one copied file)."""
    task = Task.load(PAGED)
    gate = locate_gate(PAGED, task.contract, tmp_path / "gates", "cpu", lambda m: None)
    manifest = GateManifest.model_validate(verify_gate(gate))
    result = time_candidate(GateContext(task, manifest, gate), PAGED_CANDIDATE, TimingOptions(lambda m: None, device="cpu"))
    assert "not speedups" in result.reason, result.reason
    assert [c.case for c in result.cases] == ["typical"] and result.cases[0].flags == []
    assert result.cases[0].process_seconds["reference:warm_up"] > 0
