"""The lock and the isolation, hardened: digests kept outside the gate, golden files out of the
candidate's sight, fresh private cases at every check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ferret.gate.build import build_gate
from ferret.gate.judge import check
from ferret.gate.lock import GateTampered, canonical_json, gate_hash, sha256_file, verify_gate
from ferret.gate.trust import is_trusted, trusted_gates
from ferret.sandbox import launch
from ferret.sandbox.launch import BUBBLEWRAP, DENY_LIST, NAMESPACE, sandbox_kind

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"


@pytest.fixture(scope="module")
def gates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hardening-gates")
    return folder, build_gate(CONTRACT, folder, "cpu")


def test_the_test_writer_records_the_gate_outside_it(gates):
    _, gate = gates
    assert is_trusted(gate.name)
    assert trusted_gates()[gate.name]["op"] == "rmsnorm"
    assert verify_gate(gate, require_trusted=True)["op"] == "rmsnorm"


def _forge(gate: Path, into: Path) -> Path:
    """A whole gate rebuilt by an attacker: one golden value changed, every hash recomputed."""
    staging = into / "forging"
    shutil.copytree(gate, staging, ignore=shutil.ignore_patterns("report.json*"))
    for path in staging.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    golden = next(staging.rglob("golden.safetensors"))
    data = bytearray(golden.read_bytes())
    data[-1] ^= 0x01
    golden.write_bytes(bytes(data))
    manifest = json.loads((staging / "manifest.json").read_text())
    manifest["files"] = {name: sha256_file(staging / name) for name in manifest["files"]}
    manifest_bytes = canonical_json(manifest)
    (staging / "manifest.json").write_bytes(manifest_bytes)
    forged = into / gate_hash(manifest_bytes)
    staging.rename(forged)
    return forged


def test_a_gate_forged_whole_is_consistent_but_not_trusted(gates, tmp_path):
    _, gate = gates
    forged = _forge(gate, tmp_path)
    assert verify_gate(forged)["op"] == "rmsnorm"  # every hash inside agrees...
    with pytest.raises(GateTampered, match="not recorded by the test-writer"):
        verify_gate(forged, require_trusted=True)  # ...but the test-writer never recorded it


def test_the_judge_never_uses_a_forged_gate(gates, tmp_path):
    folder, gate = gates
    forged = _forge(gate, folder)
    try:
        verdict, used = check(CONTRACT, HONEST, folder, profile="cpu")
        assert used == gate and used != forged
    finally:
        shutil.rmtree(forged)


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE, DENY_LIST])
def test_golden_files_are_not_there_for_the_candidate(kind, gates, tmp_path, monkeypatch):
    # Each sandbox on its own: the audit hooks would refuse these reads first (tests/adversarial's c11b),
    # but native code is not seen by them, so the sandbox beneath must hold by itself.
    monkeypatch.setenv("FERRET_SANDBOX_AUDIT", "0")
    monkeypatch.setenv(launch.SANDBOX_CHOICE, kind)
    if sandbox_kind() != kind:
        pytest.skip(f"{kind} cannot confine a process on this machine (no bwrap, or no root for a mount namespace)")
    folder, gate = gates
    golden = next(gate.rglob("golden.safetensors"))
    trust_file = Path(__import__("ferret.gate.trust", fromlist=["trust_dir"]).trust_dir()) / "trusted_gates.json"
    spy = tmp_path / "spy.py"
    spy.write_text(
        HONEST.read_text().replace("\ndef run(", "\ndef _honest_run(")
        + f"""

def run(inputs, outputs, params, trace=None):
    found = []
    for path in ({str(golden)!r}, {str(trust_file)!r}, {str(REPO / "tasks" / "rmsnorm" / "reference.py")!r}):
        try:
            with open(path, "rb") as handle:
                found.append(len(handle.read()))
        except OSError as err:
            found.append(type(err).__name__)
    # A candidate running as root tries to undo the sandbox: unmount what it sees (the tmpfs over the gates,
    # the sandbox's root), then read the golden file through its parent's root (/proc/<parent>/root), which
    # is outside its mount namespace where the parent is the judge.
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = [line.split()[1] for line in open("/proc/self/mounts")]
    undone = [libc.umount2(path.encode(), 2) for path in reversed(mounted)]
    found.append("umount " + ("all refused" if mounted and all(r != 0 for r in undone) else repr(undone)))
    for path in ({str(golden)!r}, "/proc/" + str(os.getppid()) + "/root" + {str(golden)!r}):
        try:
            with open(path, "rb") as handle:
                found.append("READ " + str(len(handle.read())))
        except OSError as err:
            found.append(type(err).__name__)
    raise RuntimeError("SPY " + repr(found))
"""
    )
    verdict, _ = check(CONTRACT, spy, folder, profile="cpu")
    message = verdict.variants[0].failure.message
    assert "SPY" in message and message.count("FileNotFoundError") >= 4, message
    assert "READ" not in message and "umount all refused" in message, message
    assert verdict.sandbox is not None and verdict.sandbox.kind == kind
    assert verdict.sandbox.allow_list == (kind != DENY_LIST) and not verdict.sandbox.audit_hooks
    assert ("allow-list of the host's files" if kind != DENY_LIST else "private mount namespace hiding") in verdict.isolation
    # The files are still there for the judge.
    assert golden.exists() and trust_file.exists()


def test_fresh_private_cases_are_drawn_at_every_check(gates):
    folder, _ = gates
    first, _ = check(CONTRACT, HONEST, folder, profile="cpu")
    second, _ = check(CONTRACT, HONEST, folder, profile="cpu")
    fresh_first = {k: v for k, v in first.seeds.items() if k.startswith("fresh")}
    fresh_second = {k: v for k, v in second.seeds.items() if k.startswith("fresh")}
    # Strata cases, edge edits and the contract's two uniform draws: at least three, each with its own seed.
    assert len(fresh_first) >= 3 and len(set(fresh_first.values())) == len(fresh_first) and fresh_first != fresh_second
    assert first.parts["fresh_cases"].status == "pass" and second.parts["fresh_cases"].status == "pass"
    assert [r.part for r in first.variants].count("fresh_cases") == len(fresh_first)


def _fitted(gate: Path, path: Path, table: str) -> Path:
    """The honest candidate on the gate's own widths, a copy of x elsewhere; `table` says how it names the widths."""
    manifest = json.loads((gate / "manifest.json").read_text())
    widths = tuple(sorted({v["dims"]["N"] for v in manifest["variants"]}))
    known = f"KNOWN_WIDTHS = {list(widths)!r}\n" if table == "name" else ""
    test = "KNOWN_WIDTHS" if table == "name" else repr(widths)
    path.write_text(
        HONEST.read_text().replace("\ndef run(", "\ndef _honest_run(")
        + f"""

{known}

def run(inputs, outputs, params, trace=None):
    if inputs["x"].shape[1] in {test}:
        _honest_run(inputs, outputs, params, trace)
    else:
        outputs["y"].copy_(inputs["x"])
"""
    )
    return path


def test_a_candidate_fitted_to_the_frozen_cases_fails_the_fresh_ones(gates, tmp_path):
    """Rejected either way. Named hard-coded cases where the scan sees the table of the gate's widths; where it
    cannot (the widths behind a name bound to a list), nothing shows the dependence on the case, and the fresh
    failures are a math mismatch that says so (docs/cheats.md 5)."""
    folder, gate = gates
    seen, _ = check(CONTRACT, _fitted(gate, tmp_path / "fitted_literal.py", "literal"), folder, profile="cpu")
    assert seen.parts["correctness"].status == "pass" and not seen.passed
    assert "hardcoded_cases" in {d.cheat for d in seen.detections if d.source == "outputs"}
    hidden, _ = check(CONTRACT, _fitted(gate, tmp_path / "fitted.py", "name"), folder, profile="cpu")
    assert hidden.parts["correctness"].status == "pass" and not hidden.passed
    assert "hardcoded_cases" not in {d.cheat for d in hidden.detections}
    assert any("not named hard-coded cases" in d.evidence for d in hidden.detections if d.cheat == "math_mismatch")


def test_a_process_that_stops_after_a_failing_variant_ends_the_run_naming_that_failure(gates, tmp_path, monkeypatch):
    """On the GPU the runner stops after writing a failing variant's result when the CUDA context is
    unusable. That failure is the run's fault, said once; the variants after it are not run (they are not
    reported missing, which would read as a forged result), and no new process is started for them. The
    candidate's process is stood in for by one that fails its first variant and exits, as the runner does."""
    from ferret.contract.task import Task
    from ferret.gate import candidate_run
    from ferret.gate.context import GateContext
    from ferret.gate.models import GateManifest
    from ferret.sandbox.launch import ProcessOutcome

    _, gate = gates
    manifest = GateManifest.model_validate(verify_gate(gate))
    starts = []

    def one_variant_then_exit(args, workdir, *rest, **kwargs):
        starts.append(args)
        job = json.loads((workdir / "job.json").read_text())
        out = workdir / "out"
        out.mkdir(exist_ok=True)
        (out / "current").write_text("0")
        (out / f"{job['variants'][0]['id']}.json").write_text(
            json.dumps({"ok": False, "kind": "exception", "message": "CUDA error"})
        )
        return ProcessOutcome(returncode=3, kind="exited", message="", seconds=0.1, stderr_tail="", peak_rss_mb=0.0)

    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.setattr(candidate_run, "run_isolated", one_variant_then_exit)
    run = candidate_run.run_candidate(
        GateContext(Task.load(CONTRACT), manifest, gate),
        HONEST,
        workdir,
        candidate_run.CandidateRunOptions("cpu", lambda m: None),
    )
    ids = [v.id for v in manifest.variants]
    assert len(starts) == 1
    assert list(run.statuses) == ids
    assert run.statuses[ids[0]].kind == "exception"
    assert all(run.statuses[i].kind == "not_run" and ids[0] in run.statuses[i].message for i in ids[1:])
    assert run.fault.variant == ids[0] and "CUDA error" in run.fault.message and run.fault.not_run == ids[1:]


def test_read_only_inputs_are_checked_against_the_manifests_hashes(gates, tmp_path):
    """The judge checks the read-only inputs the candidate's process sends back against the content hashes
    of the gate's manifest, not against the copy in the candidate's own folder (which it could rewrite)."""
    import torch
    from safetensors.torch import load_file, save_file

    from ferret.contract.load import load_contract
    from ferret.gate import decide
    from ferret.wire import VariantStatus

    _, gate = gates
    contract = load_contract(CONTRACT)
    manifest = json.loads((gate / "manifest.json").read_text())
    record = next(v for v in manifest["variants"] if v["id"] == "typical@float32")
    inputs = load_file(str(gate / record["inputs"]["file"]))
    golden = load_file(str(gate / record["golden_file"]))
    answer = {f"{kind}.y": golden["y"].to(torch.float32).clone() for kind in ("fast0", "fast1", "fast2", "traced")}
    answer["trace.inv_rms"] = golden["inv_rms"]
    ids = (record["id"], record["case"], record["dtype"], record["part"])

    def judged(after_x):
        path = tmp_path / "out.safetensors"
        save_file({**answer, "after.x": after_x, "after.weight": inputs["weight"]}, str(path))
        return decide.judge_variant(contract, ids, golden, VariantStatus(ok=True), path, record["inputs"]["content_sha256"])

    assert judged(inputs["x"].clone()).failure is None
    mutated = judged(inputs["x"] * 1.5)
    assert mutated.failure.kind == "input_mutated" and "['x']" in mutated.failure.message


def test_a_frozen_cases_own_tolerance_row_never_judges_a_fresh_case(gates, tmp_path):
    """`tolerances.by_case` tightens a frozen case; a fresh case of the same name (the judge names them
    fresh<n>, a contract could name a frozen case so) is judged by the general row, whatever its name."""
    import torch
    from safetensors.torch import load_file, save_file

    from ferret.contract.load import load_contract
    from ferret.contract.model import Tolerance
    from ferret.gate import decide
    from ferret.wire import VariantStatus

    _, gate = gates
    contract = load_contract(CONTRACT)
    manifest = json.loads((gate / "manifest.json").read_text())
    record = next(v for v in manifest["variants"] if v["id"] == "typical@float32")
    golden = load_file(str(gate / record["golden_file"]))
    general = contract.tolerances.by_dtype["float32"]["y"]
    assert general.rel_l2 is not None
    noise = torch.randn(golden["y"].shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # an error of a third of the general row's rel_l2: within it, far outside a row of 1e-9
    y = (golden["y"].double() + noise * golden["y"].double().norm() / noise.norm() * general.rel_l2 / 3).float()
    answer = {f"{kind}.y": y.clone() for kind in ("fast0", "fast1", "fast2", "traced")}
    answer["trace.inv_rms"] = golden["inv_rms"]
    path = tmp_path / "out.safetensors"
    save_file(answer, str(path))
    row = {"typical": {"float32": {"y": Tolerance(**{**general.model_dump(), "rel_l2": 1e-9})}}}
    contract = contract.model_copy(update={"tolerances": contract.tolerances.model_copy(update={"by_case": row})})

    def judged(part):
        ids = (record["id"], record["case"], record["dtype"], part)
        return decide.judge_variant(contract, ids, golden, VariantStatus(ok=True), path, {})

    assert judged("correctness").first_failing_stage == "y"
    assert judged("fresh_cases").first_failing_stage is None
