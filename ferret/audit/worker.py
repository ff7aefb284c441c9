"""The audit's worker process (`python -m ferret.audit.worker SETUP RESULTS`), fed item lines on stdin
(`ferret/audit/pool.py`); `handler` is the same work for a worker that is not this process (a Ray actor). The
setup's modes:

- `classify`: runs a candidate file (the honest one or a mutant) on the audit's independent cases and writes each
  case's error against the float64 reference, measured as the gate measures it (`ferret.gate.metrics.compare_to_golden`:
  the tolerance table, the error scales, the exact stages' allowances); stops early once a case is over the tolerance,
  since one is enough to call a mutant harmful;
- `judge`: judges a candidate file with the locked gate (`ferret.gate.judge.Judge`, speed and stress off) and writes
  what it said.

Mutants are this audit's own edits of an honest candidate, so `classify` runs them in this process (its own
process group, time-boxed by the pool); the gate's judgement runs them in the gate's sandbox as any candidate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import load_file

from ferret.audit.models import CaseError, Judgement, StageError
from ferret.audit.pool import CASE, DONE, CheckResult, ItemResult, WorkerSetup, result_json
from ferret.contract.model import Case, Contract
from ferret.contract.task import Task
from ferret.errors import GateTampered, MachineFault
from ferret.gate.inputs import output_specs
from ferret.gate.metrics import compare_to_golden
from ferret.gate.models import PARTS, Verdict

INPUT_PREFIX = "input:"
GOLDEN_PREFIX = "golden:"


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Cases:
    """The independent cases, as the audit wrote them (`ferret.audit.classify.write_cases`)."""

    def __init__(self, folder: Path, device: str):
        self.index = json.loads((folder / "cases.json").read_text())
        self.tensors = []
        for entry in self.index:
            loaded = load_file(str(folder / entry["file"]))
            inputs = {k[len(INPUT_PREFIX) :]: v.to(device) for k, v in loaded.items() if k.startswith(INPUT_PREFIX)}
            golden = {k[len(GOLDEN_PREFIX) :]: v for k, v in loaded.items() if k.startswith(GOLDEN_PREFIX)}
            self.tensors.append((inputs, golden))


def _outputs(contract: Contract, entry: dict, device: str) -> dict[str, torch.Tensor]:
    case = Case(name=entry["case"], dims=entry["dims"], seed=0)
    return {
        n: torch.full(shape, float("nan"), dtype=dt, device=device)
        for n, (shape, dt) in output_specs(contract, case, entry["dtype"]).items()
    }


def _stages(contract: Contract, run, inputs: dict[str, torch.Tensor], entry: dict, device: str) -> dict[str, torch.Tensor]:
    """Every stage the candidate gives on one case: outputs and in-place inputs from the fast path, the other stages
    from a traced call (as the gate reads them)."""
    params = dict(contract.params)
    fast_inputs = {k: v.clone() for k, v in inputs.items()}
    outputs = _outputs(contract, entry, device)
    run(fast_inputs, outputs, params)
    trace: dict[str, torch.Tensor] = {}
    run({k: v.clone() for k, v in inputs.items()}, _outputs(contract, entry, device), params, trace)
    inout = {i.name for i in contract.inputs if i.role == "inout"}
    got = {k: v for k, v in trace.items() if isinstance(v, torch.Tensor)}
    got |= outputs | {k: v for k, v in fast_inputs.items() if k in inout}
    return got


def _case_error(contract: Contract, run, inputs, golden, entry: dict, device: str) -> CaseError:
    error = CaseError(case=entry["case"], dtype=entry["dtype"], dims=entry["dims"], strata=entry["strata"])
    try:
        with torch.no_grad():
            got = _stages(contract, run, inputs, entry, device)
    except Exception as err:  # noqa: BLE001 - a mutant that raises is a result, not the audit's failure
        error.raised = f"{type(err).__name__}: {str(err)[:300]}"
        return error
    for stage in contract.stages:
        metrics = compare_to_golden(
            got.get(stage.candidate_stage), golden, stage, contract.tolerance(entry["dtype"], stage.name, None)
        )
        if metrics.exposed:
            error.stages.append(
                StageError(
                    stage=stage.name,
                    passed=metrics.passed,
                    reasons=metrics.reasons,
                    rel_l2=metrics.rel_l2,
                    max_abs_rel_peak=metrics.max_abs_rel_peak,
                    max_row_rel=metrics.max_row_rel,
                    nonfinite_mismatches=metrics.nonfinite_mismatches,
                )
            )
    return error


def classify_one(
    contract: Contract,
    cases: _Cases,
    path: Path,
    name: str,
    early_exit: bool,
    device: str,
    on_case: Callable[[CaseError], None] | None = None,
) -> list[CaseError]:
    """The candidate's error on every independent case; with `early_exit`, only up to the first case over the
    tolerance, or past a raise once some case ran (either makes the mutant harmful, whatever the rest say)."""
    try:
        run = _load_module(path, name).run
    except Exception as err:  # noqa: BLE001
        return [CaseError(case="load", dtype="", dims={}, raised=f"{type(err).__name__}: {str(err)[:300]}")]
    errors: list[CaseError] = []
    for entry, (inputs, golden) in zip(cases.index, cases.tensors, strict=True):
        errors.append(_case_error(contract, run, inputs, golden, entry, device))
        if on_case is not None:
            on_case(errors[-1])
        ran = [e for e in errors if e.raised is None]
        if early_exit and ran and (len(ran) < len(errors) or not ran[-1].within_tolerance):
            break
    return errors


def judgement_of(verdict: Verdict) -> Judgement:
    failed = [p for p in PARTS if verdict.parts.get(p) is not None and verdict.parts[p].status == "fail"]
    detail = "; ".join(f"{p}: {verdict.parts[p].detail[:200]}" for p in failed)
    return Judgement(
        killed=not verdict.passed,
        caught_by=failed[0] if failed else None,
        first_failing_stage=verdict.first_failing_stage,
        detections=[d.cheat for d in verdict.detections],
        detail=detail,
        seconds=verdict.seconds,
    )


def _serve(handle, results: Path) -> None:
    for line in sys.stdin:
        item = json.loads(line)
        (results / f"{item['id']}.json").write_text(result_json(handle(item["id"], Path(item["path"]))))
        print(DONE + item["id"], flush=True)


def _say_case(item_id: str, error: CaseError) -> None:
    """One finished case on stdout (`pool.CASE`): a mutant that later kills this process (a write past a buffer that
    corrupts the interpreter's heap) or hangs keeps the cases it finished."""
    print(CASE + item_id + " " + error.model_dump_json(), flush=True)


def _classifier(setup: WorkerSetup, task: Task, say_cases: bool):
    if os.environ.get("TRITON_INTERPRET") == "1":
        from ferret.sandbox.interpreter import prepare_interpreter

        prepare_interpreter()  # what the judge gives candidates' processes: the same bits, less time
    assert setup.cases is not None
    cases = _Cases(Path(setup.cases), setup.device)

    def classify(item_id: str, path: Path) -> list[CaseError]:
        name = f"ferret_audit_{item_id.replace('-', '_')}"
        on_case = partial(_say_case, item_id) if say_cases else None
        return classify_one(task.contract, cases, path, name, setup.early_exit, setup.device, on_case)

    return classify


def _the_trusted_judge(setup: WorkerSetup, task: Task):
    from ferret.gate.judge import Judge

    judge = Judge(task, setup.gates_dir or "gates", setup.profile, progress=lambda _line: None)
    if setup.gate_hash is not None and judge.gate.name != setup.gate_hash:
        # The auditor's gate is the one judged against: a worker that found or built another would judge by it.
        raise GateTampered(
            judge.gate,
            [f"this worker's gate is {judge.gate.name}, not the gate {setup.gate_hash} the auditor verified and trusts"],
        )
    return judge


def _verdicts(setup: WorkerSetup, task: Task):
    """A dispatch's check of each candidate, as its own judge makes it in a round (no stress, no torch.compile
    comparison), on the one GPU this process sees."""
    judge = _the_trusted_judge(setup, task)

    def verdict_one(item_id: str, path: Path) -> CheckResult:
        try:
            return CheckResult(verdict=judge.check(path, run_stress=False, compare_compiled=False))
        except GateTampered as err:
            return CheckResult(error=str(err), error_kind="tampered")
        except MachineFault as err:
            return CheckResult(error=str(err), error_kind="machine_fault")
        except Exception as err:  # noqa: BLE001 - the judge failed on this candidate: the dispatcher records it
            return CheckResult(error=f"{type(err).__name__}: {err}", error_kind="error")

    return verdict_one


def _judge(setup: WorkerSetup, task: Task):
    judge = _the_trusted_judge(setup, task)

    def judge_one(item_id: str, path: Path) -> Judgement:
        try:
            return judgement_of(judge.check(path, measure_speed=False, run_stress=False, record=False))
        except Exception as err:  # noqa: BLE001 - the judge's own failure is no verdict: the mutant is not killed
            return Judgement(
                killed=False,
                unjudged=True,
                detail=f"no verdict: {type(err).__name__}: {err}"[:500] + traceback.format_exc(limit=2)[-300:],
            )

    return judge_one


def handler(setup: WorkerSetup, say_cases: bool = False) -> Callable[[str, Path], ItemResult]:
    """The setup's work for one item (`item id, candidate file -> its result`), made once per worker; `say_cases`:
    a classifying worker process says each case as it ends (`_say_case`)."""
    torch.set_num_threads(1)  # the workers share the cores
    task = Task.load(Path(setup.contract))
    if setup.mode == "classify":
        return _classifier(setup, task, say_cases)
    return _judge(setup, task) if setup.mode == "judge" else _verdicts(setup, task)


def main(argv: list[str]) -> int:
    setup, results = WorkerSetup.model_validate_json(Path(argv[0]).read_text()), Path(argv[1])
    _serve(handler(setup, say_cases=True), results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
