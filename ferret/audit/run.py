"""`ferret gate audit`: a gate's strength measured by mutation testing.

    record = run_audit(Path("contracts/rmsnorm.yaml"), AuditOptions(budget=300, jobs=2))

1. the gate is found (or built) and verified, as for a check;
2. the independent cases are drawn with the audit's seeds and the honest candidates run on them (their spread);
3. mutants of the honest candidate are made (`ferret/audit/mutate.py`), a deterministic sample of `budget` of them
   spread over the operators, and each is classed against the reference (`ferret/audit/classify.py`);
4. the harmful ones, and the honest candidates a few times (the false-rejection rate), are judged by the gate with
   speed and stress off, each time-boxed;
5. the record is written to `gates/<hash>/audit.json`, its digest to the trust registry.

Steps 3 and 4 append one JSON line per mutant to the audit's folder (`gates/<hash>/audit/<key>/`) as each result
comes; `resume` skips every mutant already there, so a crash of the audit loses nothing finished.
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferret.audit import classify as cls
from ferret.audit.models import AuditRecord, CaseError, Classification, Judgement, MutantResult, RedTeamSummary
from ferret.audit.mutate import OPERATOR_NAMES, MadeMutant, make_mutants, operator
from ferret.audit.pool import Executor, Item, LocalPool, Outcome, WorkerSetup
from ferret.audit.record import write_audit
from ferret.audit.score import summarise
from ferret.backends import registry
from ferret.contract.task import Task
from ferret.errors import UsageError
from ferret.gate.judge import Judge, device_for
from ferret.gate.lock import AUDIT_FOLDER, sha256_file
from ferret.progress import ProgressLike, Reporter, as_reporter
from ferret.syntax import parse_module

CLASSIFY_STEP = "audit: classing mutants"
JUDGE_STEP = "audit: the gate judges"


@dataclass(frozen=True)
class AuditOptions:
    """`candidate`: the honest candidate mutated (the contract's first of its own language when None). `budget`: the
    most mutants classed. `rounds`: rounds of the fresh-case plan in the independent set. `honest_checks`: gate
    checks of each honest candidate (the false-rejection rate); `rounds` defaults to one per dtype. Time-boxes in
    seconds; the judging one defaults to twice the contract's case timeout and a minute, so that the gate's own clock
    speaks first."""

    candidate: Path | None = None
    profile: str | None = None
    budget: int = 400
    jobs: int = 1
    resume: bool = False
    gates_dir: Path = Path("gates")
    operators: tuple[str, ...] = OPERATOR_NAMES
    seed: int = 20261207
    rounds: int | None = None
    honest_checks: int = 2
    classify_timeout_s: float = 600.0
    judge_timeout_s: float | None = None
    progress: ProgressLike = None
    red_team: int = 0  # attempts of the red-team role (its offline attack corpus) after the mutants; 0: none
    found_dir: Path | None = None  # where its accepted harmful attempts are saved (default tests/adversarial/found)
    ray: str | None = None  # "auto" or a cluster's address: the checks go to Ray workers (ferret/audit/ray_pool.py)
    gpus: tuple[str, ...] = ()  # local workers one per GPU (CUDA_VISIBLE_DEVICES values, `choose_gpus`), not `jobs`


def require_candidate(path: Path) -> None:
    """A candidate the audit can mutate: a Python file that parses and defines `run` (UsageError naming it)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such candidate file")
    try:
        tree = parse_module(path.read_text(), filename=str(path))
    except (SyntaxError, ValueError) as err:
        raise UsageError(f"{path}: the candidate does not parse ({err})") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        raise UsageError(f"{path}: the candidate defines no top-level `run(inputs, outputs, params, trace=None)`")


def honest_candidates(task: Task, profile: str) -> list[Path]:
    """The contract's honest candidates (`tasks/<op>/candidates/`) this profile can run, its own language first."""
    folder = task.project_root / "tasks" / task.contract.op / "candidates"
    device = device_for(profile)
    found = []
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        if path.name == "__init__.py":
            continue
        language = registry.backend_for(path.read_text(errors="replace"))
        if task.contract.backend.allows(language.name) and language.unavailable(device, profile) is None:
            found.append((language.name != task.contract.backend.language, path))
    return [p for _, p in sorted(found)]


@dataclass
class _Audit:
    task: Task
    options: AuditOptions
    judge: Judge
    candidate: Path
    honest: list[Path]
    folder: Path
    progress: Reporter
    executor: Executor
    started: float = field(default_factory=time.perf_counter)

    @property
    def profile(self) -> str:
        return self.judge.profile

    def env(self) -> dict[str, str]:
        """What a worker's environment adds to its own."""
        return {"TRITON_INTERPRET": "1"} if self.judge.device == "cpu" and self.task.contract.backend.interpret_on_cpu else {}

    def setup(self, mode: str, **extra: object) -> WorkerSetup:
        return WorkerSetup.model_validate(
            {"mode": mode, "contract": str(self.task.path.resolve()), "device": self.judge.device, "env": self.env(), **extra}
        )


def _work_folder(gate: Path, candidate: Path, options: AuditOptions) -> Path:
    """The audit's folder in the gate's: one per candidate, seed, operators, rounds and budget, so `resume` only
    continues the same audit."""
    key = json.dumps([sha256_file(candidate), options.seed, sorted(options.operators), options.rounds, options.budget])
    return gate / AUDIT_FOLDER / hashlib.sha256(key.encode()).hexdigest()[:16]


def _read_lines(path: Path) -> dict[str, dict]:
    """Finished results by id; a last line cut short by a crash is dropped (that item runs again)."""
    found: dict[str, dict] = {}
    if not path.is_file():
        return found
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        found[entry["id"]] = entry
    return found


def _append(path: Path, entry: dict) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()
        os.fsync(out.fileno())


def select(mutants: list[MadeMutant], budget: int, seed: int) -> list[MadeMutant]:
    """A deterministic sample of `budget` mutants spread over the operators: each operator's mutants shuffled with
    the audit's seed, then taken one operator at a time in turn."""
    rng = random.Random(seed)
    by_operator: dict[str, list[MadeMutant]] = {}
    for made in mutants:
        by_operator.setdefault(made.operator, []).append(made)
    for group in by_operator.values():
        rng.shuffle(group)
    chosen: list[MadeMutant] = []
    while len(chosen) < budget and any(by_operator.values()):
        for name in list(by_operator):
            if by_operator[name] and len(chosen) < budget:
                chosen.append(by_operator[name].pop())
    return chosen


def case_errors(outcome: Outcome) -> list[CaseError]:
    """A classified item's errors: its result, or where its worker died or ran out of time, the cases it finished
    and then that end as a raise (so a mutant that ran on some cases and then crashed is harmful, not stillborn)."""
    if isinstance(outcome.result, list):
        return outcome.result
    return [*outcome.finished, CaseError(case="worker", dtype="", dims={}, raised=outcome.failure)]


def _classify_all(audit: _Audit, items: list[Item], early_exit: bool, log: Path, on_done=None) -> dict[str, list[CaseError]]:
    """Each item's errors on the independent cases, appended to `log` as they come (items already there skipped)."""
    finished = _read_lines(log) if audit.options.resume else {}
    errors = {k: [CaseError.model_validate(e) for e in v["errors"]] for k, v in finished.items()}
    todo = [i for i in items if i.id not in errors]
    total = len(items)

    def on_result(outcome: Outcome) -> None:
        errs = case_errors(outcome)
        errors[outcome.item.id] = errs
        _append(log, {"id": outcome.item.id, "errors": [e.model_dump(mode="json") for e in errs]})
        audit.progress.step(CLASSIFY_STEP, len(errors), total, outcome.item.id)
        if on_done is not None:
            on_done(outcome.item.id, errs)

    setup = audit.setup("classify", cases=str(audit.folder / "cases"), early_exit=early_exit)
    audit.executor.serve(setup, todo, audit.options.classify_timeout_s, audit.folder / "classify-out", on_result)
    return errors


def _judge_all(audit: _Audit, items: list[Item], log: Path) -> dict[str, Judgement]:
    finished = _read_lines(log) if audit.options.resume else {}
    judged = {k: Judgement.model_validate(v["judgement"]) for k, v in finished.items()}
    todo = [i for i in items if i.id not in judged]
    timeout = audit.options.judge_timeout_s or audit.task.contract.budgets.case_timeout_s * 2 + 60

    def on_result(outcome: Outcome) -> None:
        if not isinstance(outcome.result, Judgement):
            judgement = Judgement(killed=False, unjudged=True, detail=outcome.failure)
        else:
            judgement = outcome.result
        judgement = judgement.model_copy(update={"worker": outcome.worker or None})
        judged[outcome.item.id] = judgement
        _append(log, {"id": outcome.item.id, "judgement": judgement.model_dump(mode="json")})
        audit.progress.step(JUDGE_STEP, len(judged), len(items), outcome.item.id)
        audit.progress(f"  {outcome.item.id}: {_judged_line(judgement)}")

    # The gate this process verified against its trust registry: workers judge with it and with no other.
    setup = audit.setup("judge", gates_dir=str(audit.options.gates_dir), profile=audit.profile, gate_hash=audit.judge.gate.name)
    audit.executor.serve(setup, todo, timeout, audit.folder / "judge-out", on_result)
    return judged


def _judged_line(judgement: Judgement) -> str:
    """What the gate said of one item, for the progress line: a worker that gave no verdict is never "passed"."""
    if judgement.unjudged:
        return f"not judged ({(judgement.detail or 'no verdict')[-240:]})"
    return f"killed by {judgement.caught_by}" if judgement.killed else "passed the gate"


def _start(contract_path: Path, options: AuditOptions) -> _Audit:
    task = Task.load(contract_path)
    progress = as_reporter(options.progress)
    for name in options.operators:
        operator(name)  # an unknown operator is said before any work
    judge = Judge(task, options.gates_dir, options.profile, progress)
    honest = honest_candidates(task, judge.profile)
    candidate = options.candidate or (honest[0] if honest else None)
    if candidate is None:
        raise UsageError(
            f"{task.path}: no honest candidate in tasks/{task.contract.op}/candidates/ runs on this profile: "
            "give one with --candidate"
        )
    require_candidate(candidate)
    honest = [candidate] + [p for p in honest if p.resolve() != candidate.resolve()]
    folder = _work_folder(judge.gate, candidate, options)
    if not options.resume and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return _Audit(task, options, judge, candidate, honest, folder, progress, executor_for(options, judge))


def executor_for(options: AuditOptions, judge: Judge) -> Executor:
    """Where the checks run: `options.jobs` local processes, or with `options.ray` a Ray cluster (imported only then)."""
    if options.ray is None:
        return LocalPool(options.jobs, options.gpus)
    if options.gpus:
        raise UsageError("--gpus picks this machine's GPUs for local workers; on Ray each worker is given one GPU by Ray")
    try:
        from ferret.audit.ray_pool import RayPool
    except ImportError as err:
        raise UsageError(f"--ray needs Ray, the optional extra: pip install 'ferret[ray]' ({err})") from None

    return RayPool.connect(options.ray, cpus=options.jobs, gpu=judge.device == "cuda", gate=judge.gate, progress=judge.progress)


def run_audit(contract_path: Path, options: AuditOptions | None = None) -> AuditRecord:
    """Audit the gate of `contract_path` on this machine; write and return its record."""
    options = options or AuditOptions()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    audit = _start(Path(contract_path), options)
    try:
        return _run(audit, options, started_at)
    finally:
        audit.executor.close()


def _run(audit: _Audit, options: AuditOptions, started_at: str) -> AuditRecord:
    planned = cls.plan_independent(audit.task, audit.judge.profile, options.seed, options.rounds)
    count = cls.write_cases(audit.task, planned, audit.folder / "cases", "cpu")
    audit.progress(f"{count} independent cases drawn (seed {options.seed}); the honest candidates run on them")
    honest_items = [Item(f"honest{n}", p) for n, p in enumerate(audit.honest)]
    honest_errors = _classify_all(audit, honest_items, early_exit=False, log=audit.folder / "honest.jsonl")
    spread = cls.honest_spread([honest_errors[i.id] for i in honest_items])
    over = [
        f"{i.path.name}: {e.case} ({e.dtype}): {e.raised or 'over the tolerance'}"
        for i in honest_items
        for e in honest_errors[i.id]
        if not e.within_tolerance
    ]
    for line in over:
        audit.progress(f"an honest candidate fails an independent case: {line}")
    made = make_mutants(
        audit.candidate.read_text(),
        audit.candidate.name,
        tuple(operator(n) for n in options.operators),
        cls.size_threshold(planned, audit.task),
    )
    chosen = select(made, options.budget, options.seed)
    audit.progress(f"{len(made)} mutants made; {len(chosen)} classed against the reference")
    mutants_dir = audit.folder / "mutants"
    mutants_dir.mkdir(exist_ok=True)
    for m in chosen:
        (mutants_dir / f"{m.mutant.id}.py").write_text(m.source)
    items = [Item(m.mutant.id, mutants_dir / f"{m.mutant.id}.py") for m in chosen]
    errors = _classify_all(audit, items, early_exit=True, log=audit.folder / "classified.jsonl")
    classes: dict[str, Classification] = {m.mutant.id: cls.classify(errors[m.mutant.id], spread) for m in chosen}
    harmful = [i for i in items if classes[i.id].kind == "harmful"]
    honest_checks = [Item(f"honest{n}-check{k}", p) for n, p in enumerate(audit.honest) for k in range(options.honest_checks)]
    audit.progress(f"{len(harmful)} harmful mutants and {len(honest_checks)} honest checks go to the gate")
    judged = _judge_all(audit, honest_checks + harmful, audit.folder / "judged.jsonl")
    results = [
        MutantResult(mutant=m.mutant, classification=classes[m.mutant.id], judgement=judged.get(m.mutant.id)) for m in chosen
    ]
    with (audit.folder / "results.jsonl").open("w") as out:
        out.writelines(r.model_dump_json() + "\n" for r in results)
    record = summarise(
        audit.task,
        audit.judge.gate.name,
        audit.profile,
        audit.candidate,
        (options.seed, options.budget, list(options.operators)),
        results,
        ([judged[i.id] for i in honest_checks], over),
        count,
        started_at,
        time.perf_counter() - audit.started,
    )
    if options.red_team > 0:
        record = record.model_copy(update={"red_team": _red_team(audit, spread, options)})
    write_audit(audit.judge.gate, record)
    return record


def _red_team(audit: _Audit, spread: cls.Spread, options: AuditOptions) -> RedTeamSummary:
    """The red-team role's offline corpus against the same gate, each accepted attempt classed harmful or not the
    audit's way (its errors on the independent cases against the honest candidates' spread), never by the role."""
    from ferret.roles.red_team import RedTeam, gate_check
    from ferret.roles.red_team_corpus import AttackCorpusModel

    def harmful(path: Path) -> bool:
        item = Item(f"red-team-{sha256_file(path)[:12]}", path)
        errors = _classify_all(audit, [item], early_exit=True, log=audit.folder / "red_team_classified.jsonl")
        return cls.classify(errors[item.id], spread).kind == "harmful"

    honest = audit.candidate.read_text()
    model = AttackCorpusModel(honest, audit.task.contract)
    check = gate_check(audit.task.path, options.gates_dir, audit.profile)
    team = RedTeam(
        model, check, harmful, work_dir=audit.folder / "red_team", found_dir=options.found_dir, progress=audit.progress
    )
    report = team.run(audit.task, honest, min(options.red_team, len(model.attacks)))
    audit.progress(f"red team: {len(report.attempts)} attempts, {len(report.found)} accepted and harmful")
    return RedTeamSummary(
        attempts=len(report.attempts), passed_cheats=len(report.found), saved_paths=[str(p) for p in report.found]
    )
