"""The loop: contract -> test-writer -> locked gate -> rounds (optimizer, static scan, judge, reviewer)
-> final acceptance check in a fresh process -> typed run log.

    from ferret.dispatch import Dispatcher
    log = Dispatcher("contracts/rmsnorm.yaml").run()
    log = Dispatcher.resuming("runs/<id>").run()    # continue an interrupted run
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from ferret.audit.pool import Executor, LocalPool
from ferret.backends import cuda
from ferret.contract.task import Task
from ferret.dispatch.runlog import CandidateRecord, Established, FinalCheck, RoundRecord, RunLog, StopReason
from ferret.errors import MachineFault, UsageError
from ferret.gate.judge import Judge, judged_languages, summary
from ferret.gate.lock import GateTampered, verify_gate
from ferret.gate.models import StageSummary, TimingResult, Verdict, VerdictSummary
from ferret.gate.platform_info import device_name, resolve_profile, versions
from ferret.gate.scan import scan_candidate
from ferret.models.base import ModelError, ModelUnavailable
from ferret.progress import ProgressLike, as_reporter
from ferret.roles.base import CaseSpeed, Optimizer, OptimizerContext, ReviewContext, Reviewer, RoundFeedback, TestWriter
from ferret.roles.prompts import AGENTS_DIR as REPO_AGENTS  # the agents/ folder, by its old name here
from ferret.roles.review import StaticReviewer
from ferret.sandbox.children import run_child, stop_on_signals


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


COMPILE_LOG_CHARS = 2000
ROLES_STEP = "choosing the roles"  # the progress task of the roles' set-up


def _failures(gate: VerdictSummary | None) -> list[str]:
    """Each failing case and stage with its numbers and tolerance, as the optimizer may see them."""
    failures = []
    for case, result in (gate.cases if gate else {}).items():
        if result.failure:
            # A compiler's log is what a CUDA candidate's author needs whole; other messages are one line.
            most = COMPILE_LOG_CHARS if result.failure == "compile_error" else 200
            failures.append(f"{case}: {result.failure}: {(result.message or '')[:most]}")
        for stage, metrics in result.stages.items():
            if isinstance(metrics, StageSummary) and not metrics.passed:
                failures.append(
                    f"{case}: stage {stage}: rel_l2 {metrics.rel_l2}, max_abs_rel_peak "
                    f"{metrics.max_abs_rel_peak}, cosine {metrics.cosine}; tolerance "
                    f"{metrics.tolerance}; worst at {metrics.worst}"
                )
    return failures


def _feedback(record: CandidateRecord) -> RoundFeedback:
    """The gate's numbers as the optimizer may see them: stage, metric, value, tolerance; never goldens."""
    failures = _failures(record.gate)
    if record.error:  # the judge refused the file itself (a language the contract does not allow, say)
        failures.insert(0, f"not judged: {record.error[:COMPILE_LOG_CHARS]}")
    review = ""
    if record.review is not None:
        review = f"integrity {record.review.integrity}, plan {record.review.plan}: {record.review.recommendation}; " + "; ".join(
            f"{f.file}:{f.line}: {f.message}" for f in record.review.findings
        )
    return RoundFeedback(
        round=record.round,
        approach=record.approach,
        passed=record.gate_passed and (record.review is None or record.review.integrity == "pass"),
        first_failing_stage=record.gate.first_failing_stage if record.gate else None,
        failures=failures[:40],
        detections=[f"{d.cheat}: {d.evidence[:200]}" for d in (record.gate.detections if record.gate else [])],
        timing={"speedup": record.speedup, "target_met": record.target_met} if record.speed_measured else {},
        speed=[CaseSpeed.of(c) for c in record.gate.timing.cases] if record.gate and record.speed_measured else [],
        review=review,
    )


def _last_words(stderr: str, limit: int = 1000) -> str:
    """What a Ferret command said last: its mistake line (`ferret: ...`, its stderr's last line) whole where it
    ended with one (a traceback before it would push it out of the last `limit` characters), else the tail of
    its stderr."""
    lines = stderr.rstrip().splitlines()
    return lines[-1][:limit] if lines and lines[-1].startswith("ferret: ") else stderr[-limit:]


def _floor_text(timing: TimingResult) -> str:
    """Where a proposal stands against the physical limit, case by case (`, at 31%/12%/48% of the floor`)."""
    fractions = [c.fraction_of_floor for c in timing.cases if c.fraction_of_floor is not None]
    if not fractions:
        return ""
    generic = " (generic roofline)" if timing.roofline_source == "generic" else ""
    return f", at {'/'.join(f'{f:.0%}' for f in fractions)} of the floor{generic}"


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_run_log(folder: str | Path) -> RunLog:
    """The log of the run in `folder` (runs/<id>), or a UsageError naming the folder."""
    folder = Path(folder)
    path = folder / "run.json"
    if not path.is_file():
        raise UsageError(f"{folder} is not a run folder (no run.json): runs are folders runs/<id> made by ferret dispatch")
    try:
        return RunLog.model_validate(json.loads(path.read_text()))
    except ValueError as err:  # JSON or pydantic: not a log this version of ferret wrote
        first = str(err).strip().splitlines()[0]
        raise UsageError(f"{folder}: run.json is not a ferret run log ({type(err).__name__}: {first})") from None


def resume_contract(folder: str | Path, log: RunLog, contract: str | Path | None = None) -> Path:
    """The contract to resume the run in `folder` with: `contract` when it is the run's contract (the same
    sha256 of its text as the log's `contract_sha256`), else the run's own contract file, which must be
    unchanged since the run started. Every mistake is a UsageError whose message starts with the folder."""
    folder, original = Path(folder), Path(log.contract_path)
    short = log.contract_sha256[:12]
    if contract is not None:
        contract = Path(contract)
        if not contract.is_file():
            raise UsageError(f"{folder}: the contract {contract} to resume it with is not a file")
        if _sha256_text(contract.read_text()) == log.contract_sha256:
            return contract
        if not (original.is_file() and original.resolve() == contract.resolve()):
            raise UsageError(
                f"{folder} was started with {original} (sha256 {short}…); {contract} is a different contract: "
                "start a new run, or resume without naming a contract"
            )
    if not original.is_file():
        raise UsageError(
            f"{folder} was started with {original} (sha256 {short}…), which is not there any more (a relative path "
            "is read from the current folder): resume from the folder the run started in, or name that contract"
        )
    now = _sha256_text(original.read_text())
    if now != log.contract_sha256:
        raise UsageError(
            f"{folder} was started with {original} (sha256 {short}…), which has changed since (sha256 now {now[:12]}…): "
            f"start a new run; the contract as the run saw it is {folder / 'contract.yaml'}"
        )
    return original


def timed_devices(log: RunLog) -> set[str]:
    """The devices the run's candidates were timed on (a verdict whose speed was measured names its device)."""
    return {
        candidate.gate.timing.device
        for round_ in log.rounds
        for candidate in round_.candidates
        if candidate.gate is not None and candidate.gate.timing.measured and candidate.gate.timing.device
    }


def check_resumed_on_the_same_device(folder: Path, log: RunLog) -> None:
    """A run ranks its candidates by their speedups, so its rounds must be timed on one device: resuming on another
    (a pool that lends an H100 or an H200) would rank one device's rounds against another's. A UsageError naming
    both, before anything is written."""
    here = device_name()
    others = sorted(timed_devices(log) - {here})
    if others:
        raise UsageError(
            f"{folder}: its rounds were timed on {', '.join(others)} and this machine's device is {here}: "
            "a run's candidates are ranked by times from one device; resume it there, or start a new run"
        )


def candidate_file_name(index: int) -> str:
    return f"candidate-{index}.py"


def judged_candidate_file(folder: Path, record: CandidateRecord) -> Path | str:
    """The run folder's own copy of a judged candidate (round-NN/candidate-i.py), or why there is none. The log's
    `file` names the folder the round ran in, which a run moved to another machine (packed and resumed there) no
    longer has; the copy must still hold the bytes the round judged (its sha256), so that a final check vouches for
    the candidate the rounds ranked and for nothing edited since."""
    path = folder / f"round-{record.round:02d}" / candidate_file_name(record.index)
    if not path.is_file():
        return f"{path}: no such candidate file (round {record.round}'s candidate {record.index} is not in the run folder)"
    if hashlib.sha256(path.read_bytes()).hexdigest() != record.sha256:
        return (
            f"{path}: its sha256 is not the one round {record.round} judged ({record.sha256[:12]}…): the file "
            "changed since, and the final check judges only what the rounds judged"
        )
    return path


@dataclasses.dataclass(frozen=True)
class DispatchOptions:
    """How a dispatch runs; each field may be left out. Roles not given are chosen as the command line's are
    (`ferret.roles.resolve`). `runs_dir`: where run folders are made (runs/, or for a resumed run the folder
    that holds it). `profile`: the machine's default when None. `max_rounds` and `proposals_per_round` override
    the contract's budgets."""

    optimizer: Optimizer | None = None
    reviewer: Reviewer | None = None
    test_writer: TestWriter | None = None
    gates_dir: str | Path = "gates"
    runs_dir: str | Path | None = None
    profile: str | None = None
    max_rounds: int | None = None
    proposals_per_round: int | None = None
    progress: ProgressLike = None
    agents_dir: Path = REPO_AGENTS
    audit: bool = False  # run `ferret gate audit` once the gate is built (ferret/audit/run.py)
    audit_budget: int | None = None
    audit_jobs: int = 1
    gpus: tuple[str, ...] = ()  # each round's proposals judged at once, one per GPU (`ferret.audit.pool.choose_gpus`)
    ray: str | None = None  # "auto" or an address: each round's proposals judged at once on Ray workers


class Dispatcher:
    @classmethod
    def resuming(
        cls, run_folder: str | Path, contract: str | Path | None = None, options: DispatchOptions | None = None, **fields: Any
    ) -> Dispatcher:
        """A dispatcher that continues the interrupted run in `run_folder` (runs/<id>) when `.run()` is called:
        the contract comes from its run log (`contract`, if given, must be that same contract), the profile
        too. The other options are the constructor's. Mistakes are UsageErrors naming the folder."""
        folder = Path(run_folder)
        chosen = dataclasses.replace(options or DispatchOptions(), **fields)
        log = read_run_log(folder)
        path = resume_contract(folder, log, contract)
        profile = chosen.profile
        if profile is not None and getattr(profile, "value", profile) != log.profile:
            raise UsageError(
                f"{folder} runs with profile {log.profile}, not {getattr(profile, 'value', profile)}: resume it without a profile"
            )
        check_resumed_on_the_same_device(folder, log)
        dispatcher = cls(path, dataclasses.replace(chosen, profile=log.profile, runs_dir=chosen.runs_dir or folder.parent))
        dispatcher.resume_folder = folder
        return dispatcher

    def __init__(self, contract: str | Path, options: DispatchOptions | None = None, **fields: Any):
        """`options`, or the same fields by name (`Dispatcher(contract, optimizer=..., profile="cpu")`)."""
        chosen = dataclasses.replace(options or DispatchOptions(), **fields)
        self._use_contract(Path(contract))
        self.contract_text = self.contract_path.read_text()  # what the roles read: the contract as the user wrote it
        self.profile = resolve_profile(chosen.profile)
        self.gates_dir = Path(chosen.gates_dir)
        self.runs_dir = Path(chosen.runs_dir or "runs")
        self.max_rounds = chosen.max_rounds or self.contract.budgets.max_rounds
        self.proposals_per_round = chosen.proposals_per_round or self.contract.budgets.proposals_per_round
        if self.max_rounds < 1 or self.proposals_per_round < 1:
            raise UsageError(
                f"max_rounds and proposals_per_round must be at least 1, got {self.max_rounds}, {self.proposals_per_round}"
            )
        self.progress = as_reporter(chosen.progress)
        self.agents_dir = chosen.agents_dir
        self.audit_options = chosen
        self.gpus, self.ray = chosen.gpus, chosen.ray
        if self.gpus and self.ray:
            raise UsageError("--gpus picks this machine's GPUs for local workers; on Ray each worker is given one GPU by Ray")
        self._pool: Executor | None = None  # made at the first round that needs it, closed when the rounds end
        # A step, so that the command line's bar (or heartbeat) shows the wait: the offline optimizer lists its template
        # space before anything else (MLA's 1.6M points: ~17-20 s on this project's 2-core machine, 2026-12-03).
        self.progress.step(ROLES_STEP, 0, 3, "the optimizer")
        self.optimizer = chosen.optimizer or self._default_optimizer()
        self.progress.step(ROLES_STEP, 1, 3, "the reviewer")
        reviewer = chosen.reviewer
        self.reviewer, self.reviewer_note = (reviewer, "") if reviewer is not None else self._default_reviewer()
        self.progress.step(ROLES_STEP, 2, 3, "the test-writer")
        self.test_writer = chosen.test_writer or self._default_test_writer()
        self.progress.step(ROLES_STEP, 3, 3)
        self.resume_folder: Path | None = None  # set by Dispatcher.resuming: what run() continues by default

    # --- role selection ---------------------------------------------------------------------------
    # Roles not given are made by ferret.roles.resolve, like those named on the command line: an LLM when
    # one is reachable, else the role that needs no model (the note says why).
    def _default_optimizer(self) -> Optimizer:
        from ferret.roles.resolve import resolve_role

        return resolve_role("optimizer", None, contract_path=self.contract_path, agents_dir=self.agents_dir)[0]

    def _default_reviewer(self) -> tuple[Reviewer, str]:
        from ferret.roles.resolve import resolve_role

        return resolve_role("reviewer", None, contract_path=self.contract_path, agents_dir=self.agents_dir)

    def _default_test_writer(self) -> TestWriter:
        from ferret.roles.resolve import resolve_role

        return resolve_role("test_writer", None, contract_path=self.contract_path, agents_dir=self.agents_dir)[0]

    def _advise_cases(self, log: RunLog, folder: Path) -> None:
        """Ask the test-writer's adviser for extra cases; add the acceptable ones to the contract the gate is
        built from (runs/<id>/gate-contract.yaml). Golden values still come only from the reference."""
        from ferret.roles.test_writer import TestWriterContext, merge_cases

        log.test_writer = self.test_writer.name
        reference = self.task.reference
        context = TestWriterContext(op=self.contract.op, contract_yaml=self.contract_text, reference_doc=reference.__doc__ or "")
        try:
            advice = self.test_writer.propose_cases(context)
        except Exception as err:  # noqa: BLE001 - the contract's own cases are a complete gate: go on without advice
            log.test_writer_note = f"the test-writer's adviser failed ({type(err).__name__}: {err}); the contract's cases only"
            self.progress(log.test_writer_note)
            return
        merged, accepted, rejected = merge_cases(self.contract, advice)
        log.stage_checks = [c.model_dump() for c in advice.stage_checks]
        log.rejected_cases = rejected
        log.test_writer_note = advice.notes
        if advice.notes:
            self.progress(f"test-writer: {advice.notes}")
        for reason in rejected:
            self.progress(f"test-writer: case refused: {reason}")
        if not accepted:
            return
        target = folder / "gate-contract.yaml"
        # The derived contract lives under runs/: it names the project whose tasks/ its entries import.
        derived = merged.model_copy(update={"project": str(self.task.project_root.resolve())})
        target.write_text(yaml.safe_dump(derived.model_dump(mode="json", exclude_none=True), sort_keys=False))
        log.extra_cases, log.gate_contract_path = accepted, str(target)
        self._use_contract(target)
        self.progress(f"test-writer: {len(accepted)} extra cases added to the gate: {', '.join(accepted)}")

    def _use_contract(self, path: Path) -> None:
        """The contract the gate is built from, loaded once (a Task: the contract, its project, its entries)."""
        self.task = Task.load(path)
        self.contract_path, self.contract = self.task.path, self.task.contract

    # --- the run ----------------------------------------------------------------------------------
    def run(self, resume: str | Path | None = None) -> RunLog:
        """Run the loop; with `resume` (a run folder runs/<id>, or the one given to `Dispatcher.resuming`),
        continue that run after its last recorded round. A run folder that is not one, or whose contract or
        profile is not this dispatcher's, is a UsageError raised before anything is written.

        On SIGINT or SIGTERM (from the main thread, unless the caller installed its own handlers; an ignored
        disposition, as a script's background job inherits, counts as the default) every process the run started
        is stopped and the log is saved as `incomplete`, with the command that resumes it."""
        with stop_on_signals():
            return self._run(resume)

    def _run(self, resume: str | Path | None) -> RunLog:
        contract_text = self.contract_text
        resume = resume if resume is not None else self.resume_folder
        if resume is not None:
            folder = Path(resume)
            log = read_run_log(folder)
            if _sha256_text(contract_text) != log.contract_sha256:
                resume_contract(folder, log, self.contract_path)  # raises, naming both contracts
                raise UsageError(f"{self.contract_path} changed after this dispatcher read it: start a new run")
            if self.profile != log.profile:
                raise UsageError(f"{folder} runs with profile {log.profile}; this dispatcher's profile is {self.profile}")
            check_resumed_on_the_same_device(folder, log)
            self.progress(f"resuming {log.run_id} after round {len(log.rounds)}")
        else:
            run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
            folder = self.runs_dir / run_id
            folder.mkdir(parents=True)
            (folder / "contract.yaml").write_text(contract_text)  # pinned as the run saw it
            log = RunLog(
                run_id=run_id,
                op=self.contract.op,
                contract_path=str(self.contract_path),
                contract_sha256=_sha256_text(contract_text),
                profile=self.profile,
                optimizer=self.optimizer.name,
                reviewer=self.reviewer.name,
                reviewer_note=self.reviewer_note,
                started_at=_now(),
                versions=versions(),
            )
        if resume is not None and log.gate_contract_path:
            # The run's own copy (the path in the log may be relative to another working folder).
            self._use_contract(folder / Path(log.gate_contract_path).name)
        self.progress(
            f"run {log.run_id}: optimizer {log.optimizer}, reviewer {log.reviewer}, test-writer {self.test_writer.name}"
        )
        if log.reviewer_note:
            self.progress(log.reviewer_note)
        log.save(folder)
        try:
            if resume is None:
                self._advise_cases(log, folder)
                log.save(folder)
            try:
                self._rounds(log, folder)
            finally:
                if self._pool is not None:
                    self._pool.close()
        except GateTampered as err:
            log.status, log.stop, log.stop_reason = "incomplete", StopReason.GATE_TAMPERED, f"gate tampered, run aborted: {err}"
        except KeyboardInterrupt as err:  # Ctrl-C, or ferret.errors.Interrupted (SIGINT or SIGTERM)
            log.interrupted_by = int(getattr(err, "signum", signal.SIGINT))
            log.status, log.stop = "incomplete", StopReason.INTERRUPTED
            log.stop_reason = (
                f"interrupted by {signal.Signals(log.interrupted_by).name} (resume with `ferret dispatch --resume {folder}`)"
            )
        except Exception as err:  # noqa: BLE001 - an error ends the run as incomplete, never as success
            log.status, log.stop, log.stop_reason = "incomplete", StopReason.ERROR, f"error: {type(err).__name__}: {err}"
        log.ended_at = _now()
        log.save(folder)
        self.progress(f"run {log.run_id}: {log.status} ({log.stop_reason}); log {folder / 'run.json'}")
        return log

    def _rounds(self, log: RunLog, folder: Path) -> None:
        # The judge is made once: the task loaded, the gate found (or built) and verified; each check
        # verifies the lock again.
        self.judge = Judge(self.task, self.gates_dir, self.profile, self.progress)
        gate = self.judge.gate
        if log.gate_hash is not None and log.gate_hash != gate.name:
            # Resumed under another gate (the lock covers the contract's cases and the judge's code): the rounds before
            # keep their verdicts, and the final check judges the best under this gate.
            log.earlier_gates.append(log.gate_hash)
            self.progress(
                f"the gate is {gate.name[:12]} now, {log.gate_hash[:12]} in the rounds before (the contract's "
                "cases or the judge's code changed): their verdicts stand as they were, and the final check "
                "judges the best under the new gate"
            )
        log.gate_hash = gate.name
        if self.audit_options.audit:
            self._audit_gate(log)
        baseline_source = self.judge.task.baseline_file.read_text()
        pivot_after = 2
        since_progress = 0
        best_score = self._score(log.best) if log.best else None
        stop = None
        for number in range(len(log.rounds) + 1, self.max_rounds + 1):
            # The gate is verified before every round: tampering aborts the run.
            verify_gate(gate, require_trusted=True)
            history = [_feedback(c) for r in log.rounds for c in r.candidates]
            must_pivot = since_progress >= pivot_after
            context = OptimizerContext(
                op=self.contract.op,
                contract_yaml=self.contract_text,
                baseline_source=baseline_source,
                abi=self.contract.candidate_abi.signature,
                history=history,
                tried_approaches=sorted({c.approach for r in log.rounds for c in r.candidates}),
                must_pivot=must_pivot,
                round=number,
                languages=judged_languages(self.task, self.profile),
                cuda_flags=cuda.flags_from_contract(self.contract.backend.compile_flags),
            )
            self.progress.step("rounds", number - 1, self.max_rounds, f"round {number}: the optimizer proposes")
            proposals = self.optimizer.propose(context)[: self.proposals_per_round]
            if not proposals:
                stop = (StopReason.NOTHING_TO_TRY, "the optimizer has nothing more to try" + self._why_nothing_to_rank(log))
                break
            record = RoundRecord(round=number, gate_verified=True, pivot_requested=must_pivot)
            round_dir = folder / f"round-{number:02d}"
            round_dir.mkdir(exist_ok=True)
            improved = False
            for candidate in self._judge_round(number, proposals, round_dir):
                record.candidates.append(candidate)
                score = self._score(candidate)
                if score is not None and (best_score is None or score > best_score):
                    best_score, log.best, improved = score, candidate, True
            log.rounds.append(record)
            log.save(folder)
            since_progress = 0 if improved else since_progress + 1
            if log.best is not None and self._fully_established(log.best):
                stop = (StopReason.TARGET_MET, "a candidate passed the gate and the review, and met the speed target")
                break
        else:
            stop = (StopReason.MAX_ROUNDS, f"reached the maximum of {self.max_rounds} rounds")
        self.progress.step("rounds", self.max_rounds, self.max_rounds)
        log.stop, log.stop_reason = stop
        self._finish(log, folder)

    def _why_nothing_to_rank(self, log: RunLog) -> str:
        """Why a search stops after its first correct candidate where speed is not measured."""
        judged = [c for r in log.rounds for c in r.candidates]
        if any(c.gate_passed for c in judged) and not any(c.speed_measured for c in judged):
            reason = "no GPU" if self.profile == "cpu" else "speed was not measured"
            return f" ({reason}: speed is not measured, so the search has nothing to rank correct candidates by)"
        return ""

    def _judge_round(self, number: int, proposals: list, round_dir: Path) -> list[CandidateRecord]:
        """Each proposal judged and reviewed, one after another by this process's judge, or with `gpus` or `ray`
        all at once (`_judge_at_once`); the records in the proposals' order."""
        if self.gpus or self.ray:
            return self._judge_at_once(number, proposals, round_dir)
        records = []
        for index, proposal in enumerate(proposals, 1):
            self.progress.step("rounds", number - 1, self.max_rounds, f"round {number}: candidate {index}/{len(proposals)}")
            records.append(self._judge(number, index, proposal, round_dir))
        return records

    def _new_record(self, number: int, index: int, proposal, round_dir: Path) -> CandidateRecord:
        path = round_dir / candidate_file_name(index)
        path.write_text(proposal.source)
        return CandidateRecord(
            round=number,
            index=index,
            approach=proposal.approach,
            file=str(path),
            sha256=hashlib.sha256(proposal.source.encode()).hexdigest(),
            notes=proposal.notes,
        )

    def _judge(self, number: int, index: int, proposal, round_dir: Path) -> CandidateRecord:
        record = self._new_record(number, index, proposal, round_dir)
        path = Path(record.file)
        self.progress(f"round {number}, candidate {index} ({proposal.approach}): judging")
        static = scan_candidate(path, self.contract)
        try:
            # Rounds leave out stress and the torch.compile comparison (the final check runs both); the static
            # scan is done once, here, and handed to the judge.
            verdict = self.judge.check(
                path, run_stress=False, compare_compiled=False, static=static, progress=self.progress.quiet()
            )
        except (GateTampered, MachineFault):  # the run stops: a fault of the machine is no candidate's record
            raise
        except Exception as err:  # noqa: BLE001 - the judge failed on this candidate: record, go on
            record.error = f"{type(err).__name__}: {err}"
            return record
        return self._conclude(record, verdict, proposal, static)

    def _judge_at_once(self, number: int, proposals: list, round_dir: Path) -> list[CandidateRecord]:
        """A round's proposals judged at once by workers that each see one GPU alone (local ones, or Ray's): a
        candidate's correctness run and its timing, and the baseline timed against it, all on that one GPU. Each
        worker's judge holds the gate this run verified (`gate_hash`); a tampered gate or a machine fault stops the
        run as here. Reviews follow, in the proposals' order."""
        from ferret.audit.pool import CheckResult, Item, Outcome, WorkerSetup

        records = [self._new_record(number, i, p, round_dir) for i, p in enumerate(proposals, 1)]
        setup = WorkerSetup(
            mode="verdict",
            contract=str(self.task.path.resolve()),
            device=self.judge.device,
            gates_dir=str(self.gates_dir),
            profile=self.profile,
            gate_hash=self.judge.gate.name,
        )
        outcomes: dict[str, Outcome] = {}
        where = f"GPUs {', '.join(self.gpus)}" if self.gpus else f"Ray ({self.ray})"
        self.progress(f"round {number}: {len(records)} candidates judged at once on {where}")
        timeout = self.contract.budgets.check_timeout_s * 2 + 60
        items = [Item(f"candidate-{r.index}", Path(r.file)) for r in records]
        self._executor().serve(setup, items, timeout, round_dir / "judged", lambda o: outcomes.__setitem__(o.item.id, o))
        concluded = []
        for record, proposal, item in zip(records, proposals, items, strict=True):
            outcome = outcomes[item.id]
            record.judged_on = outcome.worker or None
            checked = outcome.result if isinstance(outcome.result, CheckResult) else CheckResult(error=outcome.failure)
            if checked.error_kind == "tampered":
                raise GateTampered(self.judge.gate, [f"{outcome.worker}: {checked.error}"])
            if checked.error_kind == "machine_fault":
                raise MachineFault(f"{outcome.worker}: {checked.error}")
            if checked.verdict is None:
                record.error = checked.error or "no verdict"
                concluded.append(record)
                continue
            self.progress(f"round {number}, candidate {record.index} ({proposal.approach}): judged on {outcome.worker}")
            concluded.append(self._conclude(record, checked.verdict, proposal, scan_candidate(Path(record.file), self.contract)))
        return concluded

    def _executor(self) -> Executor:
        """Local workers one per GPU, or a Ray cluster (`--ray auto` starts one with a CPU per proposal if none runs)."""
        if self._pool is None:
            if self.ray is None:
                self._pool = LocalPool(devices=self.gpus)
            else:
                try:
                    from ferret.audit.ray_pool import RayPool
                except ImportError as err:
                    raise UsageError(f"--ray needs Ray, the optional extra: pip install 'ferret[ray]' ({err})") from None
                gpu = self.judge.device == "cuda"
                self._pool = RayPool.connect(self.ray, self.proposals_per_round, gpu, self.judge.gate, self.progress)
        return self._pool

    def _conclude(self, record: CandidateRecord, verdict: Verdict, proposal, static) -> CandidateRecord:
        """The verdict on the record, then the review."""
        number, index, path = record.round, record.index, Path(record.file)
        record.gate = summary(verdict)
        record.gate_passed = verdict.passed
        record.speed_measured = verdict.timing.measured
        if verdict.timing.measured:
            record.speedup = verdict.timing.geomean_speedup
            record.target_met = verdict.timing.target_met
        context = ReviewContext(
            op=self.contract.op,
            candidate_path=str(path),
            candidate_source=proposal.source,
            gate_summary=record.gate,
            static_findings=static,
            next_plan=proposal.notes,
        )
        try:
            record.review = self.reviewer.review(context)
        except (ModelError, ModelUnavailable) as err:
            # The model failed (after the SDK's own retries): this candidate keeps the static scan's verdict,
            # which says so, and the run goes on; a static review never counts as an LLM review.
            static_review = StaticReviewer().review(context)
            note = f"the LLM reviewer failed ({type(err).__name__}: {str(err)[:300]}); {static_review.recommendation}"
            record.review = static_review.model_copy(update={"recommendation": note})
            self.progress(f"round {number}, candidate {index}: {note}")
        outcome = "gate pass" if verdict.passed else f"gate FAIL at {verdict.first_failing_stage or 'integrity/run'}"
        speed = (
            f", speedup {record.speedup:.2f}x{_floor_text(verdict.timing)}"
            if record.speedup
            else (", speed not measured" if not record.speed_measured else "")
        )
        self.progress(f"round {number}, candidate {index}: {outcome}{speed}; review integrity {record.review.integrity}")
        return record

    @staticmethod
    def _score(record: CandidateRecord | None) -> float | None:
        if record is None or not record.gate_passed or record.review is None or record.review.integrity != "pass":
            return None
        return record.speedup if record.speedup is not None else 0.0

    def _fully_established(self, record: CandidateRecord) -> bool:
        return bool(record.speed_measured and record.target_met and record.review and record.review.reviewer != "static-scan")

    def _finish(self, log: RunLog, folder: Path) -> None:
        best = log.best
        if best is None:
            log.status = "incomplete" if log.stop == StopReason.MAX_ROUNDS else "rejected"
            log.established = Established()
            return
        judged = judged_candidate_file(folder, best)
        # Where the run folder no longer holds the bytes the rounds judged, the check is not run (nothing to vouch for)
        final = self._final_check(judged) if isinstance(judged, Path) else FinalCheck(passed=False, exit_code=None, error=judged)
        log.final_check = final
        if final.verdict is None:
            # No verdict (the check not run, or the judge's own fault: out of memory, a crash of the judge) says
            # nothing of the candidate, so the run is not rejected: it stays incomplete, saying why.
            log.established = Established(correct=True, speed_measured=best.speed_measured, target_met=best.target_met)
            log.status = "incomplete"
            log.stop_reason += (
                f"; no final acceptance check: {judged}"
                if final.exit_code is None
                else f"; the final acceptance check ended without a verdict (exit {final.exit_code}): "
                f"run it again with `ferret dispatch --resume {folder}`"
            )
            return
        llm = best.review is not None and best.review.reviewer != "static-scan"
        log.established = Established(
            correct=True,
            reviewed_by=best.review.reviewer if best.review else None,
            llm_reviewed=llm,
            speed_measured=best.speed_measured,
            target_met=best.target_met,
            final_check_passed=final.passed,
        )
        if not final.passed:
            log.status = "rejected"
            log.stop_reason += "; the final acceptance check on fresh cases failed"
        elif not best.speed_measured:
            log.status = "correct_speed_not_measured"
        elif not llm:
            log.status = "correct_static_review_only"
        elif best.target_met:
            log.status = "accepted"
        else:
            log.status = "incomplete" if log.stop == StopReason.MAX_ROUNDS else "rejected"
        self._hold_to_audit(log)

    def _audit_gate(self, log: RunLog) -> None:
        """`ferret gate audit` of the gate just built (its record in gates/<hash>/audit.json, trusted by digest)."""
        from ferret.audit.run import AuditOptions, run_audit

        options = AuditOptions(
            profile=self.profile, gates_dir=self.gates_dir, jobs=self.audit_options.audit_jobs, progress=self.progress
        )
        if self.audit_options.audit_budget:
            options = dataclasses.replace(options, budget=self.audit_options.audit_budget)
        record = run_audit(self.contract_path, options)
        score = "none (no harmful mutant)" if record.mutation_score is None else f"{record.mutation_score:.1%}"
        self.progress(f"audit: {record.killed} of {record.harmful} harmful mutants rejected by the gate: score {score}")

    def _hold_to_audit(self, log: RunLog) -> None:
        """A run is never called accepted on a gate whose last audit fell below the contract's audit.min_score, nor
        on one with no audit the trust registry vouches for (missing, or edited since it was written): it stays
        incomplete, saying why."""
        from ferret.audit.record import read_audit

        target = self.contract.audit
        trusted = read_audit(self.judge.gate) if getattr(self, "judge", None) is not None else None
        if trusted is not None and trusted.record is not None:
            log.audit_score = trusted.record.mutation_score
        if target is None or log.status != "accepted":
            return
        if trusted is None or trusted.record is None:
            log.audit_note = f"not accepted: the contract asks for audit.min_score {target.min_score}, and " + (
                trusted.problem if trusted is not None and trusted.problem else "the gate was never audited"
            )
        elif trusted.record.mutation_score is None or trusted.record.mutation_score < target.min_score:
            log.audit_note = (
                f"not accepted: the gate's last audit scored {trusted.record.mutation_score}, below the contract's "
                f"audit.min_score {target.min_score} (`ferret gate audit` says which mutants survive)"
            )
        else:
            log.audit_note = (
                f"the gate's last audit scored {trusted.record.mutation_score:.1%} (audit.min_score {target.min_score})"
            )
            return
        log.status = "incomplete"
        log.stop_reason += "; " + log.audit_note
        self.progress(log.audit_note)

    def _final_check(self, candidate: Path) -> FinalCheck:
        """The best candidate judged again in a fresh process, on fresh private cases."""
        self.progress(f"final acceptance check of {candidate.name} in a fresh process")
        verdict_file = candidate.with_name(candidate.stem + ".final-verdict.json")
        command = [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "check",
            str(self.contract_path),
            str(candidate),
            "--gates-dir",
            str(self.gates_dir),
            "--profile",
            self.profile,
            "--verdict-out",
            str(verdict_file),
        ]
        done = run_child(
            command, stdout=subprocess.PIPE, text=True, on_stderr_line=lambda line: self.progress(f"final check | {line}")
        )
        try:
            verdict = Verdict.model_validate_json(verdict_file.read_bytes())
        except (OSError, ValueError) as err:
            return FinalCheck(
                passed=False,
                exit_code=done.returncode,
                error=f"no verdict ({type(err).__name__}): {_last_words(done.stderr or '')}",
            )
        # Its timing (with the torch.compile comparison the rounds leave out) is the run's reported speed.
        return FinalCheck(passed=verdict.passed and done.returncode == 0, exit_code=done.returncode, verdict=summary(verdict))
