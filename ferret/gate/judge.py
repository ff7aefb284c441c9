"""The judge: verifies the gate, runs a candidate in its own process on inputs only, and decides.

The five parts of the verdict follow the kernel verification protocol: correctness on the contract's
cases, every dtype, edge cases, bitwise determinism, and a stress run (GPU). Timing comes after, in its
own process, and only for a candidate that is correct.
"""

from __future__ import annotations

import datetime as _dt
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.load import load_contract
from ferret.contract.model import Case, Contract
from ferret.gate import detect
from ferret.gate.build import build_key, find_gate, tensor_content_sha256
from ferret.gate.inputs import draw_inputs, output_specs
from ferret.gate.scan import scan_candidate
from ferret.gate.lock import sha256_file, verify_gate
from ferret.gate.metrics import StageMetrics, compare_stage
from ferret.gate.models import (
    PARTS, Detection, GateManifest, PartResult, RunFailure, RunFault, TimingResult, VariantRecord, VariantResult, Verdict,
)
from ferret.gate.platform_info import default_profile, device_name, versions
from ferret.errors import JudgeError, UsageError
from ferret.gate.report import append_verdict
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.sandbox.children import run_child, stop_on_signals
from ferret.sandbox.launch import ProcessOutcome, candidate_environment, hiding_available, run_isolated


def isolation_summary() -> str:
    base = "own process, empty working folder, scrubbed environment, fixed import path, timeout, RSS watchdog"
    if hiding_available():
        return base + "; private mount namespace hiding the gates folder, the trust registry and tasks/"
    return base + "; no mount namespace on this machine: golden files are never given to the candidate, but not hidden"

Progress = Reporter


def locate_gate(contract_path: Path, contract: Contract, gates_dir: Path, profile: str, progress: Progress) -> Path:
    """The verified gate for this contract and machine, built by the test-writer's own process if missing."""
    gate = find_gate(gates_dir, build_key(contract, profile))
    if gate is None:
        progress("no gate for this contract on this machine yet: the test-writer builds one")
        command = [sys.executable, "-m", "ferret.gate.build", str(contract_path), "--gates-dir", str(gates_dir), "--profile", profile]
        built = run_child(command, stdout=subprocess.PIPE, stderr=None, text=True)
        if built.returncode != 0:
            raise JudgeError(f"the test-writer failed to build the gate (exit {built.returncode})")
        gate = Path(built.stdout.strip().splitlines()[-1])
    return gate


def _prepare_inputs(contract: Contract, gate: Path, record: VariantRecord, target: Path) -> None:
    if record.inputs.stored:
        shutil.copyfile(gate / record.inputs.file, target)
        return
    case = next(c for c in contract.cases_for("gpu") + contract.cases_for("cpu") if c.name == record.case)
    inputs = draw_inputs(contract, case, record.dtype)
    for name, tensor in inputs.items():
        if tensor_content_sha256(tensor) != record.inputs.content_sha256[name]:
            raise JudgeError(f"regenerated input {record.id}/{name} differs from the gate's content hash")
    save_file(inputs, str(target))


@dataclass
class FreshVariant:
    id: str
    case: Case
    dtype: str
    seed: int
    inputs: dict[str, torch.Tensor]
    golden: dict[str, torch.Tensor]


def draw_fresh_cases(contract_path: Path, contract: Contract, profile: str, device: str) -> list[FreshVariant]:
    """Private cases for this check only: OS-random seeds, dims drawn within the contract's ranges, golden
    values from the canonical reference run here, in the judge. They are written nowhere the candidate
    can see before it has answered."""
    fresh = contract.cases.fresh
    ranges = getattr(fresh, profile) if fresh is not None else {}
    if fresh is None or not ranges or fresh.count == 0:
        return []
    reference = load_entry(contract.reference.entry, project_root_of(contract_path))
    rng = secrets.SystemRandom()
    drawn = []
    for number in range(1, fresh.count + 1):
        seed = secrets.randbits(62)
        dims = {dim: rng.randint(low, high) for dim, (low, high) in ranges.items()}
        case = Case(name=f"fresh{number}", dims=dims, seed=seed, description="drawn privately at check time")
        inputs = draw_inputs(contract, case, contract.primary_dtype)
        with torch.no_grad():
            stages = reference({k: v.to(device) for k, v in inputs.items()}, dict(contract.params))
        golden = {st.name: stages[st.name].detach().to("cpu", torch.float32 if contract.reference.golden_dtype == "float32" else torch.float64)
                  for st in contract.stages}
        drawn.append(FreshVariant(f"{case.name}@{contract.primary_dtype}", case, contract.primary_dtype, seed, inputs, golden))
    return drawn


def _failure_from_status(status: dict) -> RunFailure:
    return RunFailure(kind=status.get("kind", "exception"), message=status.get("message", ""), traceback=status.get("traceback"))


def hidden_from_candidates(gate: Path, contract_path: Path) -> list[Path]:
    """What a process running candidate code must not see: the gates folder, the trust registry, and the
    project's tasks/ (the reference) and gates/."""
    from ferret.gate.trust import trust_dir

    trust_dir().mkdir(parents=True, exist_ok=True)
    project = project_root_of(contract_path)
    return [gate.parent.resolve(), trust_dir().resolve(), project / "tasks", project / "gates"]


def _variant_job(variant_id: str, inputs_file: Path, contract: Contract, case: Case, dtype: str) -> dict:
    specs = output_specs(contract, case, dtype)
    return {
        "id": variant_id,
        "inputs_file": str(inputs_file),
        "outputs": {n: [list(shape), str(dt).removeprefix("torch.")] for n, (shape, dt) in specs.items()},
        "inout": [i.name for i in contract.inputs if i.role == "inout"],
        "in_only": [i.name for i in contract.inputs if i.role == "in"],
    }


def _write_candidate_job(
    contract: Contract, manifest: GateManifest, gate: Path, candidate: Path, workdir: Path, device: str,
    run_stress: bool, fresh: list[FreshVariant],
) -> list[dict]:
    """The candidate's folder: its own copy of the candidate, every variant's inputs (never a golden value)
    and job.json. Returns the variants in the order the runner takes them."""
    (workdir / "in").mkdir(exist_ok=True)
    shutil.copyfile(candidate, workdir / "candidate.py")
    variants = []
    for record in manifest.variants:
        target = workdir / "in" / f"{record.id}.safetensors"
        _prepare_inputs(contract, gate, record, target)
        case = next(c for c in contract.cases_for(manifest.profile) if c.name == record.case)
        variants.append(_variant_job(record.id, target, contract, case, record.dtype))
    for item in fresh:
        target = workdir / "in" / f"{item.id}.safetensors"
        save_file(item.inputs, str(target))
        variants.append(_variant_job(item.id, target, contract, item.case, item.dtype))
    stress_index = None
    if device == "cuda" and run_stress:
        sizes = [r.inputs.nbytes for r in manifest.variants]
        stress_index = max(range(len(sizes)), key=sizes.__getitem__)
    job = {
        "candidate": str(workdir / "candidate.py"),
        "entry": contract.candidate_abi.entry,
        "device": device,
        "params": contract.params,
        "repeats": contract.budgets.determinism_repeats,
        "stress_iterations": contract.budgets.stress_iterations,
        "stress_variant": stress_index,
        "variants": variants,
        "result_dir": str(workdir / "out"),
    }
    (workdir / "job.json").write_text(json.dumps(job))
    return variants


@dataclass
class CandidateRun:
    """What the candidate's process left: a status per variant, the stress result, and the fault that
    ended it early, if one did."""

    statuses: dict[str, dict]
    stress: dict | None
    fault: RunFault | None = None


def _position(out: Path) -> int | None:
    """The step the candidate's process last said it started (a variant's index; past the last, the stress run)."""
    try:
        return int((out / "current").read_text())
    except (OSError, ValueError):
        return None


def _run_candidate(
    contract: Contract,
    manifest: GateManifest,
    gate: Path,
    candidate: Path,
    workdir: Path,
    device: str,
    progress: Progress,
    run_stress: bool = True,
    fresh: list[FreshVariant] = (),
    contract_path: Path = Path("."),
    deadline: float | None = None,
) -> CandidateRun:
    """Run every variant in one candidate process. A fault that ends the process (a hang, a crash, memory,
    the check's deadline) is charged to the variant it happened on; the variants after it are not run."""
    progress = as_reporter(progress)
    variants = _write_candidate_job(contract, manifest, gate, candidate, workdir, device, run_stress, list(fresh))
    ids = [v["id"] for v in variants]
    out = workdir / "out"

    def moved(position: object) -> None:
        if isinstance(position, int) and position < len(ids):
            progress.step("candidate", position, len(ids), ids[position])
        elif isinstance(position, int):
            progress.step("candidate", len(ids), len(ids), "stress run")

    progress.step("candidate", 0, len(ids), "starting the candidate's process")
    outcome = run_isolated(
        [sys.executable, "-m", "ferret.sandbox.runner", "job.json"],
        workdir,
        candidate_environment(workdir, interpret=device == "cpu"),
        contract.budgets.case_timeout_s,
        contract.budgets.candidate_memory_mb,
        hide=hidden_from_candidates(gate, contract_path),
        finished_marker=out / "done",
        deadline=deadline,
        progress_token=lambda: _position(out),
        on_progress=moved,
    )
    progress.step("candidate", len(ids), len(ids), "done")
    if (out / "load.json").exists():
        return _load_failed(ids, json.loads((out / "load.json").read_text()))
    statuses = {vid: json.loads((out / f"{vid}.json").read_text()) for vid in ids if (out / f"{vid}.json").exists()}
    stress = json.loads((out / "stress.json").read_text()) if (out / "stress.json").exists() else None
    if (out / "done").exists() and outcome.kind == "exited":
        return CandidateRun(statuses, stress)
    return _ended_early(ids, statuses, stress, outcome, _position(out), contract)


def _load_failed(ids: list[str], failure: dict) -> CandidateRun:
    """The candidate could not be loaded: said once, on the first variant; the others were not run."""
    fault = RunFault(kind="exception", message=failure.get("message", ""), variant=ids[0], not_run=ids[1:])
    statuses = {ids[0]: {"ok": False, **failure}}
    statuses |= {vid: _not_run(f"the candidate could not be loaded (see {ids[0]})") for vid in ids[1:]}
    return CandidateRun(statuses, None, fault)


def _not_run(why: str) -> dict:
    return {"ok": False, "kind": "not_run", "message": f"not run: {why}"}


def _ended_early(
    ids: list[str], statuses: dict[str, dict], stress: dict | None, outcome: ProcessOutcome, position: int | None,
    contract: Contract,
) -> CandidateRun:
    """The candidate's process ended before its last result: name the fault on the step it happened in."""
    kind = {"timeout": "timeout", "deadline": "timeout", "out_of_memory": "out_of_memory"}.get(outcome.kind, "crash")
    message = outcome.message or f"the candidate's process exited with code {outcome.returncode}"
    if outcome.kind == "timeout":
        message += f" (budgets.case_timeout_s is {contract.budgets.case_timeout_s:g})"
    elif outcome.kind == "deadline":
        message = f"the check's deadline (budgets.check_timeout_s, {contract.budgets.check_timeout_s:g}s) passed: killed"
    at = 0 if position is None else position
    if at >= len(ids):
        # During the stress run or the teardown: every variant has its result.
        stress = stress or {"error": f"{kind}: {message}"}
        return CandidateRun(statuses, stress, RunFault(kind=kind, message=message, variant="stress"))
    if ids[at] in statuses:
        # It wrote this variant's result and stopped (the runner does when a failure left the CUDA context
        # unusable): that failure is the fault.
        kind, message = "exception", f"the candidate's process stopped after its failure on {ids[at]} " \
            f"({statuses[ids[at]].get('kind')}: {statuses[ids[at]].get('message', '')[:300]})"
    else:
        where = "while starting or loading the candidate, " if position is None else ""
        statuses[ids[at]] = {"ok": False, "kind": kind, "message": f"{where}{message}; last output: {outcome.stderr_tail[-800:]}"}
    rest = ids[at + 1:]
    statuses |= {vid: _not_run(f"the candidate's process ended at {ids[at]} ({kind})") for vid in rest}
    return CandidateRun(statuses, stress, RunFault(kind=kind, message=message, variant=ids[at], not_run=rest))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads included, unlike torch.equal)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _judge_variant(
    contract: Contract,
    ids: tuple[str, str, str, str],
    golden: dict[str, torch.Tensor],
    status: dict | None,
    tensors_file: Path,
    input_digests: dict[str, str],
) -> VariantResult:
    vid, case, dtype, part = ids
    base = dict(id=vid, case=case, dtype=dtype, part=part)
    missing = None
    if status is None:
        missing = "no result for this case: the candidate's process ended the run early (a forged done marker?)"
    elif status.get("ok"):
        try:
            got = load_file(str(tensors_file))
        except Exception as err:  # noqa: BLE001 - a missing or corrupt result is the candidate's doing
            missing = f"the result file is missing or unreadable ({type(err).__name__}): written over or deleted by the candidate"
    if missing is not None:
        result = VariantResult(**base, passed=False, failure=RunFailure(kind="result_missing", message=missing))
        result.detections = detect.from_failure(result)
        return result
    if not status.get("ok"):
        result = VariantResult(**base, passed=False, failure=_failure_from_status(status), seconds=status.get("seconds"))
        result.detections = detect.from_failure(result)
        return result
    outputs = [o.name for o in contract.outputs]
    inout = [i.name for i in contract.inputs if i.role == "inout"]
    repeats = contract.budgets.determinism_repeats
    names = outputs + inout
    prefix = {n: ("fast" if n in outputs else "inout") for n in names}
    repeats_equal = all(
        bitwise_equal(got[f"{prefix[n]}0.{n}"], got[f"{prefix[n]}{r}.{n}"]) for n in names for r in range(1, repeats)
    )
    traced_equal = all(bitwise_equal(got[f"fast0.{n}"], got[f"traced.{n}"]) for n in outputs)
    stages: list[StageMetrics] = []
    # The judge's own arithmetic may use the GPU (large stages); the candidate's process is long gone.
    compare_device = "cuda" if torch.cuda.is_available() else "cpu"
    for stage in contract.stages:
        if stage.name in outputs:
            value = got[f"fast0.{stage.name}"]
        elif stage.name in inout:
            value = got[f"inout0.{stage.name}"]
        else:
            value = got.get(f"trace.{stage.name}")
        stages.append(
            compare_stage(value, golden[stage.name], stage, contract.tolerance(dtype, stage.name), device=compare_device)
        )
    first_failing = next((s.stage for s in stages if not s.passed), None)
    result = VariantResult(
        **base,
        passed=first_failing is None and repeats_equal and traced_equal,
        stages=stages,
        first_failing_stage=first_failing,
        repeats_bitwise_equal=repeats_equal,
        traced_equals_fast=traced_equal,
        triton_launches=status.get("launches"),
        kernels=status.get("kernels", []),
        aten_compute=status.get("aten_compute", {}),
        seconds=status.get("seconds"),
    )
    # The read-only inputs as the candidate left them, checked here against the content hashes the judge
    # holds (the gate's manifest; the fresh cases' own), not against the copy in the candidate's folder.
    changed = [n for n, digest in input_digests.items()
               if f"after.{n}" in got and tensor_content_sha256(got[f"after.{n}"]) != digest]
    if changed:
        result.passed = False
        result.failure = RunFailure(kind="input_mutated", message=f"read-only inputs {changed} changed during the call")
    result.detections = (
        detect.from_failure(result)
        + detect.from_runtime(result, status, got, outputs, contract.backend.language, bitwise_equal)
        + detect.from_outputs(result, got, golden, outputs)
    )
    if any(d.source == "runtime" for d in result.detections):
        result.passed = False
    return result


def _case_part(results: list[VariantResult]) -> PartResult:
    """A part made of case variants: each failure named; variants not run counted once, with the reason."""
    not_run = [r for r in results if r.failure is not None and r.failure.kind == "not_run"]
    failed = [r for r in results if not r.passed and r not in not_run and (r.failure is not None or r.first_failing_stage is not None)]
    detail = [f"{r.id}: {r.failure.kind}: {r.failure.message[:200]}" if r.failure else f"{r.id}: stage {r.first_failing_stage}"
              for r in failed]
    if not_run:
        detail.append(f"{len(not_run)} of {len(results)} variants not run ({not_run[0].failure.message.removeprefix('not run: ')})")
    return PartResult(status="fail" if failed or not_run else "pass", detail="; ".join(detail) or f"{len(results)} case variants")


def _parts(
    results: list[VariantResult], stress: dict | None, device: str, run_stress: bool, detections: list[Detection]
) -> dict[str, PartResult]:
    parts: dict[str, PartResult] = {}
    for part in ("correctness", "dtypes", "edge_cases", "fresh_cases"):
        mine = [r for r in results if r.part == part]
        if not mine:
            parts[part] = PartResult(status="skipped", detail="no such cases in the contract")
            continue
        parts[part] = _case_part(mine)
    ran = [r for r in results if r.failure is None]
    nondet = [r.id for r in ran if not r.repeats_bitwise_equal]
    traced = [r.id for r in ran if not r.traced_equals_fast]
    detail = []
    if nondet:
        detail.append(f"repeated fast runs differ bitwise on {nondet}")
    if traced:
        detail.append(f"traced run's final outputs differ bitwise from the fast path on {traced}")
    parts["determinism"] = PartResult(
        status="fail" if detail or not ran else "pass",
        detail="; ".join(detail) or (f"{len(ran)} variants bitwise equal over repeats" if ran else "no variant ran"),
    )
    integrity = [d for d in detections if d.source in ("static", "runtime")]
    parts["integrity"] = PartResult(
        status="fail" if integrity else "pass",
        detail="; ".join(f"{d.cheat} (cheats.md {d.catalogue}): {d.evidence[:200]}" for d in integrity)
        or "static scan clean; no library compute, launches checked, harness intact",
    )
    if device != "cuda":
        parts["stress"] = PartResult(status="skipped", detail="needs a GPU")
    elif not run_stress:
        parts["stress"] = PartResult(status="skipped", detail="not requested")
    elif stress is None:
        parts["stress"] = PartResult(status="fail", detail="the stress run did not complete")
    elif "error" in stress:
        parts["stress"] = PartResult(status="fail", detail=stress["error"])
    else:
        bad = stress["outputs_differing_from_first"] > 0 or stress["memory_growth_bytes"] > 0
        parts["stress"] = PartResult(
            status="fail" if bad else "pass",
            detail=f"{stress['iterations']} iterations on {stress['variant']}: {stress['outputs_differing_from_first']} "
            f"outputs differed from the first, device memory grew {stress['memory_growth_bytes']} bytes",
        )
    return {p: parts[p] for p in PARTS}


def check(
    contract_path: str | Path,
    candidate_path: str | Path,
    gates_dir: str | Path = "gates",
    profile: str | None = None,
    progress: ProgressLike = None,
    measure_speed: bool = True,
    run_stress: bool = True,
    compare_compiled: bool = True,
) -> tuple[Verdict, Path]:
    """Judge one candidate; append the verdict to the gate's report. Returns (verdict, gate folder).

    `run_stress=False` leaves the stress part out (reported as skipped) and `compare_compiled=False` times
    the candidate against the eager baseline only: the dispatcher's rounds do both to stay quick, and its
    final acceptance check runs everything. `progress` is a reporter, a function of one line, or None (lines
    go to the `ferret` logger). The whole check after the gate is found has the contract's deadline
    (`budgets.check_timeout_s`). On SIGINT or SIGTERM (when called from the main thread with the default
    handlers) every process it started is killed and its folders removed before `Interrupted` is raised.

    Raises ContractError for a bad contract, UsageError for a profile this machine cannot run, and
    GateTampered for a gate whose lock does not hold.
    """
    with stop_on_signals():
        return _check(Path(contract_path), Path(candidate_path), Path(gates_dir), profile, as_reporter(progress),
                      measure_speed, run_stress, compare_compiled)


def _check(
    contract_path: Path, candidate_path: Path, gates_dir: Path, profile: str | None, progress: Reporter,
    measure_speed: bool, run_stress: bool, compare_compiled: bool,
) -> tuple[Verdict, Path]:
    started_wall = time.perf_counter()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    contract = load_contract(contract_path)
    if not candidate_path.is_file():
        raise FileNotFoundError(f"{candidate_path}: no such candidate file")
    profile = profile or default_profile()
    device = _device_for(profile)
    gate = locate_gate(contract_path, contract, gates_dir, profile, progress)
    manifest = GateManifest.model_validate(verify_gate(gate, require_trusted=True))
    progress(f"gate {gate.name[:16]}… verified ({len(manifest.files)} files)")
    deadline = time.monotonic() + contract.budgets.check_timeout_s

    static = scan_candidate(candidate_path, contract)
    for finding in static:
        progress(f"static scan: {finding.evidence}")
    fresh = draw_fresh_cases(contract_path, contract, profile, device)
    if fresh:
        progress(f"{len(fresh)} fresh private cases drawn: " + ", ".join(f"{f.id} {f.case.dims}" for f in fresh))
    run, results = _run_and_judge(contract, contract_path, manifest, gate, candidate_path, device, progress, run_stress,
                                  fresh, deadline)
    detections = detect.unique(
        static
        + [d for r in results for d in r.detections]
        + detect.hardcoded_cases([r for r in results if r.part != "fresh_cases"], [r for r in results if r.part == "fresh_cases"])
    )
    parts = _parts(results, run.stress, device, run_stress, detections)
    passed = all(p.status != "fail" for p in parts.values())
    first_failing = next((s.name for s in contract.stages if any(r.first_failing_stage == s.name for r in results)), None)
    timing = _timing(contract_path, contract, manifest, gate, candidate_path, progress, compare_compiled, device,
                     passed, measure_speed, deadline)
    if timing.detections:
        # A time the guards call impossible or replayed rejects the candidate, however correct it was.
        detections = detect.unique(detections + timing.detections)
        parts["integrity"] = PartResult(
            status="fail", detail="; ".join(f"{d.cheat} (cheats.md {d.catalogue}): {d.evidence[:200]}" for d in timing.detections)
        )
        passed = False
    verdict = Verdict(
        passed=passed,
        first_failing_stage=first_failing,
        gate_hash=gate.name,
        op=contract.op,
        profile=profile,
        candidate_path=str(candidate_path),
        candidate_sha256=sha256_file(candidate_path),
        parts=parts,
        detections=detections,
        variants=results,
        timing=timing,
        device=device_name(),
        versions=versions(),
        seeds={r.id: r.seed for r in manifest.variants} | {f.id: f.seed for f in fresh},
        isolation=isolation_summary(),
        fault=run.fault,
        started_at=started_at,
        seconds=time.perf_counter() - started_wall,
    )
    append_verdict(gate, verdict)
    return verdict, gate


def _device_for(profile: str) -> str:
    if profile not in ("cpu", "gpu"):
        raise UsageError(f"profile {profile!r}: expected cpu or gpu")
    if profile == "gpu" and not torch.cuda.is_available():
        raise UsageError("profile gpu needs a CUDA GPU, and this machine has none (torch.cuda.is_available() is False); "
                         "use profile cpu")
    return "cuda" if profile == "gpu" else "cpu"


def _run_and_judge(
    contract: Contract, contract_path: Path, manifest: GateManifest, gate: Path, candidate_path: Path, device: str,
    progress: Reporter, run_stress: bool, fresh: list[FreshVariant], deadline: float,
) -> tuple[CandidateRun, list[VariantResult]]:
    """The candidate's process over every variant, then each variant judged against its golden stages."""
    workdir = Path(tempfile.mkdtemp(prefix="ferret-candidate-"))
    try:
        run = _run_candidate(contract, manifest, gate, candidate_path, workdir, device, progress, run_stress, fresh,
                             contract_path, deadline)
        # The gate is verified again before the verdict: nothing may have changed while the candidate ran.
        verify_gate(gate, require_trusted=True)
        to_judge = [
            ((r.id, r.case, r.dtype, r.part), lambda r=r: load_file(str(gate / r.golden_file)), r.inputs.content_sha256)
            for r in manifest.variants
        ] + [
            ((f.id, f.case.name, f.dtype, "fresh_cases"), lambda f=f: f.golden,
             {n: tensor_content_sha256(t) for n, t in f.inputs.items()})
            for f in fresh
        ]
        results = []
        for ids, golden, input_digests in to_judge:
            vid = ids[0]
            result = _judge_variant(contract, ids, golden(), run.statuses.get(vid), workdir / "out" / f"{vid}.safetensors",
                                    input_digests)
            results.append(result)
            if result.failure is None or result.failure.kind != "not_run":
                progress(f"  {vid}: {_mark(result)}")
        if run.fault is not None:
            # Said once: the variant's own line above already gave the message (except for the stress run).
            said = "" if run.fault.variant in run.statuses else f": {run.fault.message[:300]}"
            progress(f"the candidate's run ended at {run.fault.variant} ({run.fault.kind}{said}); "
                     f"{len(run.fault.not_run)} variants after it not run")
        return run, results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _mark(result: VariantResult) -> str:
    """One variant's outcome in a progress line."""
    if result.passed:
        return "ok"
    if result.failure:
        return f"FAIL ({result.failure.kind}: {result.failure.message[:160]})"
    if result.first_failing_stage:
        failing = next(st for st in result.stages if st.stage == result.first_failing_stage)
        return f"FAIL at stage {result.first_failing_stage}: {'; '.join(failing.reasons)}"
    if result.repeats_bitwise_equal and result.traced_equals_fast and result.detections:
        return f"FAIL ({result.detections[0].cheat}: {result.detections[0].evidence[:160]})"
    return "FAIL (not bitwise deterministic)" if not result.repeats_bitwise_equal else "FAIL (traced run differs from the fast path)"


def _timing(
    contract_path: Path, contract: Contract, manifest: GateManifest, gate: Path, candidate_path: Path, progress: Reporter,
    compare_compiled: bool, device: str, passed: bool, requested: bool, deadline: float,
) -> TimingResult:
    if device != "cuda":
        return TimingResult(measured=False, reason="no GPU: speed is not measured (an interpreter time is never a speedup)")
    if not passed:
        return TimingResult(measured=False, reason="not timed: the candidate is not correct")
    if not requested:
        return TimingResult(measured=False, reason="speed measurement not requested")
    if time.monotonic() >= deadline:
        return TimingResult(measured=False, reason="not timed: the check's deadline (budgets.check_timeout_s) passed")
    from ferret.bench.timing import time_candidate

    return time_candidate(contract_path, contract, manifest, gate, candidate_path, progress, compare_compiled,
                          deadline=deadline)


def summary(verdict: Verdict) -> dict:
    """The compact form printed on the `GATE_RESULT` line."""
    return {
        "pass": verdict.passed,
        "first_failing_stage": verdict.first_failing_stage,
        "gate": verdict.gate_hash,
        "candidate_sha256": verdict.candidate_sha256,
        "parts": {k: v.status for k, v in verdict.parts.items()},
        "detections": [{"cheat": d.cheat, "catalogue": d.catalogue, "evidence": d.evidence[:300]} for d in verdict.detections],
        "fault": verdict.fault.model_dump(exclude={"not_run"}) | {"not_run": len(verdict.fault.not_run)} if verdict.fault else None,
        "cases": {
            r.id: {
                "pass": r.passed,
                **({"failure": r.failure.kind, "message": r.failure.message[:300]} if r.failure else {}),
                "stages": {
                    s.stage: (
                        {"pass": s.passed, "rel_l2": s.rel_l2, "max_abs_rel_peak": s.max_abs_rel_peak, "cosine": s.cosine}
                        | ({"worst": s.worst.named or s.worst.index} if s.worst and not s.passed else {})
                        | ({"tolerance": s.tolerance.model_dump(exclude_none=True)} if s.tolerance and not s.passed else {})
                        if s.exposed
                        else "not exposed"
                    )
                    for s in r.stages
                },
            }
            for r in verdict.variants
        },
        "timing": verdict.timing.model_dump(exclude={"cases": {"__all__": {"samples"}}}),
    }
