"""`ferret` on the command line.

Exit codes: 0 pass, 1 fail, 2 bad usage or bad contract, 3 tampered gate, 4 internal error of the judge,
5 a fault of the machine (disk full, the judge's own out-of-memory, a lost GPU: nothing recorded against the
candidate, run it again), 6 incomplete dispatch, 130/143 interrupted by SIGINT/SIGTERM. Results go to stdout
(`ferret check` prints one `GATE_RESULT {json}` line, or with --json the bare JSON object); progress and errors go
to stderr, a mistake of the user's as one line `ferret: ...` (a UsageError), never a traceback.
"""

from __future__ import annotations

import enum
import json
import os
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from ferret.errors import UsageError

try:  # the click that typer runs on: its own copy since typer 0.2x, else click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as click_errors
if TYPE_CHECKING:
    from ferret.contract.model import ProfileName
    from ferret.dispatch.runlog import RunLog

_NO_ARGS_IS_HELP = getattr(click_errors, "NoArgsIsHelpError", ())  # click >= 8.2

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_TAMPERED, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_MACHINE, EXIT_INCOMPLETE = 5, 6

EXIT_CODES = (
    "Exit codes: 0 pass, 1 fail, 2 bad usage or bad contract, 3 tampered gate, 4 internal error of the judge, "
    "5 a fault of the machine (disk full, the judge's own out-of-memory, a lost GPU: nothing recorded against the "
    "candidate, run it again), 6 incomplete dispatch, 130/143 interrupted by SIGINT/SIGTERM."
)


def _epilog(stdout: str) -> str:
    return f"stdout: {stdout}. stderr: progress, and a mistake as one line `ferret: ...`.\n\n{EXIT_CODES}"


class _FerretGroup(TyperGroup):
    """The `ferret` command group: a mistake the option parser finds (an unknown option, a value outside its
    choices, a missing argument) is one line `ferret: ...` on stderr and exit 2, like every other usage error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(
                args=args, prog_name=prog_name or "ferret", complete_var=complete_var, standalone_mode=False, **extra
            )
        try:
            code = super().main(args=args, prog_name="ferret", complete_var=complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as err:
            if err.format_message().strip():  # without rich the help is the message; with rich it is printed already
                err.show()
            sys.exit(err.exit_code)
        except click_errors.UsageError as err:
            where = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
            message = err.format_message().replace("Value error, ", "")  # pydantic's prefix, in typer's choice errors
            typer.echo(f"ferret: {message}{where}", err=True)
            sys.exit(EXIT_USAGE)
        except click_errors.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except typer.Abort:
            typer.echo("ferret: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else EXIT_PASS)


app = typer.Typer(
    cls=_FerretGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Ferret: kernels written by agents, judged by a locked gate.",
    epilog=_epilog(
        "only results: the gate folder (gate build), one GATE_RESULT {json} line (check), one RUN_RESULT "
        "{json} line (dispatch), or with --json just the JSON object"
    ),
)
gate_app = typer.Typer(no_args_is_help=True, help="Build and verify locked gates.")
app.add_typer(gate_app, name="gate")


def _print_version(value: bool) -> None:
    if value:
        from ferret import __version__

        typer.echo(f"ferret {__version__}")
        raise typer.Exit(EXIT_PASS)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Ferret: kernels written by agents, judged by a locked gate."""


class Profile(str, enum.Enum):
    """The case profile: exactly these two, checked by the option parser."""

    cpu = "cpu"
    gpu = "gpu"


_REPORTER = None


def _reporter():
    """The command's progress on stderr (ferret.progress.ConsoleReporter): every line with the time since
    the command started, a live bar on a terminal, a heartbeat line elsewhere."""
    global _REPORTER
    if _REPORTER is None:
        from ferret.progress import ConsoleReporter

        _REPORTER = ConsoleReporter()
    return _REPORTER


def _progress(message: str) -> None:
    _reporter().say(message)


def _close_reporter() -> None:
    global _REPORTER
    if _REPORTER is not None:
        _REPORTER.close()
        _REPORTER = None


def _guarded(action):
    """Run `action`, mapping every failure class to its documented exit code and a one-line reason."""
    from ferret.errors import ContractError, GateTampered, Interrupted, MachineFault
    from ferret.sandbox.children import stop_on_signals

    try:
        with stop_on_signals():  # SIGINT and SIGTERM raise Interrupted: every `finally` runs, then exit 130 / 143
            try:
                return action()
            finally:
                _close_reporter()  # the live bar and heartbeat end before the last line is printed
    except ContractError as err:
        typer.echo(f"ferret: bad contract: {err}", err=True)
        raise typer.Exit(EXIT_USAGE) from err
    except UsageError as err:
        typer.echo(f"ferret: {err}", err=True)
        raise typer.Exit(EXIT_USAGE) from err
    except FileNotFoundError as err:
        typer.echo(f"ferret: {err}", err=True)
        raise typer.Exit(EXIT_USAGE) from err
    except GateTampered as err:
        typer.echo(f"ferret: TAMPERED: {err}", err=True)
        raise typer.Exit(EXIT_TAMPERED) from err
    except MachineFault as err:
        typer.echo(f"ferret: machine fault: {err}", err=True)
        raise typer.Exit(EXIT_MACHINE) from err
    except typer.BadParameter as err:
        typer.echo(f"ferret: {err}", err=True)
        raise typer.Exit(EXIT_USAGE) from err
    except typer.Exit:
        raise
    except Interrupted as err:
        typer.echo(f"ferret: interrupted by {signal.Signals(err.signum).name}", err=True)
        raise typer.Exit(err.exit_code) from err
    except Exception as err:  # noqa: BLE001 - anything else is the judge's own fault: say so, exit 4
        traceback.print_exc()
        typer.echo(f"ferret: internal error: {type(err).__name__}: {err}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from err


def _profile_option(default: Profile | None = None):
    return typer.Option(
        default,
        "--profile",
        help="Case profile: cpu (small, interpreter) or gpu (production, needs a CUDA GPU)."
        + ("" if default else " Default: gpu if a CUDA GPU is present, else cpu."),
    )


def _profile(profile: Profile | None) -> ProfileName:
    """The profile to use: gpu only on a machine with a CUDA GPU (else a UsageError naming --profile)."""
    from ferret.gate.platform_info import resolve_profile

    return resolve_profile(profile.value if profile is not None else None, option="--profile")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _contract_argument():
    return typer.Argument(..., help="contracts/<op>.yaml", dir_okay=False)


def _gates_dir_option():
    return typer.Option(Path("gates"), "--gates-dir", file_okay=False, help="Where gates are built and found.")


@gate_app.command("build", epilog=_epilog("the gate folder gates/<hash>"))
def gate_build(
    contract: Path = _contract_argument(),
    gates_dir: Path = _gates_dir_option(),
    profile: Profile | None = _profile_option(),
) -> None:
    """Build (or reuse) the locked gate of a contract: inputs and golden stages from the canonical reference."""

    def action():
        from ferret.gate.build import build_gate

        gate = build_gate(contract, gates_dir, _profile(profile), progress=_reporter())
        typer.echo(str(gate))

    _guarded(action)


GATE_NAME = re.compile(r"[0-9a-f]{64}")


def _is_gate_folder(path: Path) -> bool:
    """Whether `path` is (or was) a gate: it has a manifest, or, its manifest deleted, it still looks like one
    (a gates/<hash> name or a cases/ folder); such a folder is verified and reported tampered, not ignored."""
    return path.is_dir() and (
        (path / "manifest.json").exists() or bool(GATE_NAME.fullmatch(path.name)) or (path / "cases").is_dir()
    )


@gate_app.command("verify", epilog=_epilog("one line `intact: ...` for an intact gate"))
def gate_verify(gate: Path = typer.Argument(..., help="gates/<hash>")) -> None:
    """Exit 0 if every byte of the gate matches its lock; exit 3 naming each changed, missing or added file."""

    def action():
        from ferret.gate.lock import verify_gate

        if not gate.exists():
            raise UsageError(f"{gate} does not exist: gates are folders gates/<hash> made by `ferret gate build`")
        if not _is_gate_folder(gate):
            raise UsageError(
                f"{gate} is not a gate folder (no manifest.json): gates are folders gates/<hash> made by `ferret gate build`"
            )
        manifest = verify_gate(gate)
        typer.echo(f"intact: {gate.name} ({len(manifest['files'])} files, op {manifest['op']}, profile {manifest['profile']})")

    _guarded(action)


def _gpus(spec: str | None) -> tuple[str, ...]:
    """`--gpus` against the GPUs this process sees; none without the option."""
    if spec is None:
        return ()
    import torch

    from ferret.audit.pool import choose_gpus

    return choose_gpus(spec, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))


@gate_app.command(
    "audit", epilog=_epilog("one line AUDIT_RESULT {json}: the score and counts (the whole record: gates/<hash>/audit.json)")
)
def gate_audit(
    contract: Path = _contract_argument(),
    candidate: Path | None = typer.Option(
        None, "--candidate", dir_okay=False, help="The honest candidate to mutate. Default: the contract's first of its language."
    ),
    gates_dir: Path = _gates_dir_option(),
    profile: Profile | None = _profile_option(),
    budget: int = typer.Option(400, "--budget", min=1, help="The most mutants classed (spread over the operators)."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Worker processes classing and judging mutants at once."),
    resume: bool = typer.Option(False, "--resume", help="Continue the same audit, skipping every mutant already finished."),
    operators: str | None = typer.Option(None, "--operators", help="Comma-separated mutation operators. Default: all."),
    red_team: int = typer.Option(
        0, "--red-team", min=0, help="Attempts of the red-team role's offline attack corpus after the mutants (0: none)."
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        help="auto|ADDRESS: check on Ray workers (pip install ferret[ray]); auto joins a running cluster or starts one "
        "here with --jobs CPUs.",
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="all|N|0,1: one local worker per GPU, each seeing that GPU alone (instead of --jobs)."
    ),
) -> None:
    """Measure the gate's strength: mutants of an honest candidate, classed against the reference, the harmful ones
    judged by the gate; with --red-team, the attack corpus too (accepted harmful attacks saved as regression cases).
    Exit 1 when the score falls below the contract's audit.min_score or an attack passed."""

    def action():
        from ferret.audit.mutate import OPERATOR_NAMES
        from ferret.audit.run import AuditOptions, require_candidate, run_audit

        if candidate is not None:
            require_candidate(candidate)  # a bad candidate is said before any gate is built
        chosen = tuple(o.strip() for o in operators.split(",") if o.strip()) if operators else OPERATOR_NAMES
        options = AuditOptions(
            candidate=candidate,
            profile=_profile(profile),
            budget=budget,
            jobs=jobs,
            resume=resume,
            gates_dir=gates_dir,
            operators=chosen,
            progress=_reporter(),
            red_team=red_team,
            ray=ray,
            gpus=_gpus(gpus),
        )
        record = run_audit(contract, options)
        counts = ("mutants", "harmful", "killed", "benign", "band", "stillborn", "unjudged", "honest_false_rejections")
        result = {"gate": record.gate_hash, "mutation_score": record.mutation_score} | {k: getattr(record, k) for k in counts}
        found = record.red_team.passed_cheats if record.red_team is not None else None
        typer.echo("AUDIT_RESULT " + json.dumps(result | {"meets_min": record.meets_min, "red_team_passed_cheats": found}))
        raise typer.Exit(EXIT_FAIL if record.meets_min is False or found else EXIT_PASS)

    _guarded(action)


def _json_option():
    return typer.Option(False, "--json", help="Print only the JSON object on stdout, without its RESULT prefix.")


@gate_app.command("red-team", epilog=_epilog("one line RED_TEAM_RESULT {json}, or with --json only the JSON object"))
def gate_red_team(
    contract: Path = _contract_argument(),
    model: str = typer.Option(
        "scripted",
        "--model",
        help="scripted (the offline attack corpus) or a model spec: anthropic[:MODEL], claude-cli, openai:URL:MODEL.",
    ),
    budget: int | None = typer.Option(None, "--budget", min=1, help="Attempts. Default: the whole corpus (scripted), else 8."),
    candidate: Path | None = typer.Option(
        None, "--candidate", dir_okay=False, help="The honest candidate the attacks start from. Default: tasks/<op>/candidates/."
    ),
    found_dir: Path | None = typer.Option(
        None, "--found-dir", file_okay=False, help="Where accepted harmful attempts are saved. Default: tests/adversarial/found."
    ),
    gates_dir: Path = _gates_dir_option(),
    profile: Profile | None = _profile_option(),
    json_only: bool = _json_option(),
) -> None:
    """Attack the contract's gate: attempts that pass while computing less, detecting the judge or working outside
    the kernel. Exit 0 when no accepted attempt is harmful, 1 when one is (each saved as a regression case)."""

    def action():
        import tempfile

        from ferret.contract.task import Task
        from ferret.roles.red_team import RedTeam, gate_check
        from ferret.roles.red_team_corpus import AttackCorpusModel, default_honest_candidate, red_team_model
        from ferret.roles.red_team_harm import ReferenceHarm

        task, chosen = Task.load(contract), _profile(profile)
        honest = (candidate or default_honest_candidate(task)).read_text()
        team_model = red_team_model(model, honest, task.contract)
        attempts = budget or (len(team_model.attacks) if isinstance(team_model, AttackCorpusModel) else 8)
        if isinstance(team_model, AttackCorpusModel):
            attempts = min(attempts, len(team_model.attacks))
        with tempfile.TemporaryDirectory(prefix="ferret-red-team-") as work:
            check = gate_check(contract, gates_dir, chosen)
            harm = ReferenceHarm(task, chosen)
            team = RedTeam(team_model, check, harm, work_dir=Path(work), found_dir=found_dir, progress=_progress)
            report = team.run(task, honest, attempts)
        result = report.model_dump_json()
        typer.echo(result if json_only else "RED_TEAM_RESULT " + result)
        raise typer.Exit(EXIT_FAIL if report.found else EXIT_PASS)

    _guarded(action)


@app.command("check", epilog=_epilog("one line GATE_RESULT {json}, or with --json only the JSON object"))
def check_command(
    contract: Path = _contract_argument(),
    candidate: Path = typer.Argument(..., help="A candidate file following the contract's ABI."),
    gates_dir: Path = _gates_dir_option(),
    profile: Profile | None = _profile_option(),
    speed: bool = typer.Option(True, "--speed/--no-speed", help="Time a correct candidate against the baseline (GPU)."),
    json_only: bool = _json_option(),
    verdict_out: Path | None = typer.Option(
        None, "--verdict-out", help="Also write the whole verdict (the Verdict schema) as JSON to this file.", dir_okay=False
    ),
) -> None:
    """Judge a candidate: build or reuse the gate, verify it, run the candidate on inputs only, decide."""

    def action():
        from ferret.gate.judge import check, summary

        if candidate.is_dir():
            raise UsageError(f"{candidate} is a folder: CANDIDATE is one Python file following the contract's ABI")
        if not candidate.exists():
            raise UsageError(f"{candidate}: no such candidate file")
        verdict, gate = check(contract, candidate, gates_dir, _profile(profile), progress=_reporter(), measure_speed=speed)
        if verdict_out is not None:
            verdict_out.write_text(verdict.model_dump_json(indent=1))
        result = json.dumps(summary(verdict).as_json(), default=str)
        typer.echo(result if json_only else "GATE_RESULT " + result)
        _progress(f"{'PASS' if verdict.passed else 'FAIL'}; report: {gate / 'report.json'}")
        raise typer.Exit(EXIT_PASS if verdict.passed else EXIT_FAIL)

    _guarded(action)


@app.command("dispatch", epilog=_epilog("one line RUN_RESULT {json}, or with --json only the JSON object"))
def dispatch_command(
    contract: Path | None = typer.Argument(
        None, help="contracts/<op>.yaml; left out with --resume, which takes the run's own.", dir_okay=False
    ),
    optimizer: str | None = typer.Option(
        None,
        "--optimizer",
        help="template-search, or a model spec: anthropic:MODEL, claude-cli, openai:URL:MODEL. "
        "Default: an LLM if one is reachable, else template-search.",
    ),
    reviewer: str | None = typer.Option(
        None, "--reviewer", help="static, or a model spec. Default: an LLM if reachable, else static."
    ),
    test_writer: str | None = typer.Option(
        None,
        "--test-writer",
        help="contract-cases (no extra cases), or a model spec for the adviser that proposes extra gate cases. "
        "Default: an LLM if reachable.",
    ),
    max_rounds: int | None = typer.Option(None, "--max-rounds", min=1, help="Overrides the contract's budgets.max_rounds."),
    proposals_per_round: int | None = typer.Option(
        None, "--proposals-per-round", min=1, help="Overrides the contract's budgets.proposals_per_round."
    ),
    gates_dir: Path = _gates_dir_option(),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", file_okay=False, help="Where run folders runs/<id> are made."),
    profile: Profile | None = _profile_option(),
    resume: Path | None = typer.Option(
        None, "--resume", help="runs/<id> of an interrupted run to continue (its contract and profile are the run's)."
    ),
    json_only: bool = _json_option(),
    audit: bool = typer.Option(
        False, "--audit", help="Audit the gate (`ferret gate audit`, default budget) once it is built, before the rounds."
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="all|N|0,1: judge a round's proposals at once, one per GPU (its baseline timed on the same one)."
    ),
    ray: str | None = typer.Option(
        None, "--ray", help="auto|ADDRESS: judge a round's proposals at once on Ray workers (pip install ferret[ray])."
    ),
) -> None:
    """Run the loop: test-writer, locked gate, optimizer rounds judged by the gate and reviewed, final check.

    Exit 0 accepted or correct (see the status), 1 rejected, 6 incomplete (resume it with --resume runs/<id>).
    """

    def action():
        from ferret.dispatch.dispatcher import Dispatcher, DispatchOptions

        contract_path, run_profile = _dispatch_contract_and_profile(contract, resume, profile)
        # Each role the option names, of its own kind (`resolve_role`), or None: the Dispatcher resolves it.
        roles: dict[str, Any] = {
            kind: _role_named_by(f"--{kind.replace('_', '-')}", spec, kind, contract_path)
            for kind, spec in (("optimizer", optimizer), ("reviewer", reviewer), ("test_writer", test_writer))
        }
        options = DispatchOptions(
            **roles,
            gates_dir=gates_dir,
            runs_dir=None if resume is not None else runs_dir,  # a resumed run stays in its own folder's parent
            profile=None if resume is not None else run_profile,
            max_rounds=max_rounds,
            proposals_per_round=proposals_per_round,
            progress=_reporter(),
            audit=audit,
            gpus=_gpus(gpus),
            ray=ray,
        )
        if resume is not None:
            dispatcher = Dispatcher.resuming(resume, contract_path, options)
        else:
            dispatcher = Dispatcher(contract_path, options)
        log = dispatcher.run()
        result = _run_result_json(log)
        typer.echo(result if json_only else "RUN_RESULT " + result)
        raise typer.Exit(_dispatch_exit_code(log))

    _guarded(action)


def _dispatch_contract_and_profile(
    contract: Path | None, resume: Path | None, profile: Profile | None
) -> tuple[Path, str | None]:
    """(the contract the run follows, the profile of a new run). A resumed run keeps its own contract and
    profile (None here: its log has it), so --profile may only repeat it; any mistake is a UsageError."""
    from ferret.dispatch.dispatcher import read_run_log, resume_contract

    if resume is None:
        if contract is None:
            raise UsageError(
                "dispatch needs CONTRACT (contracts/<op>.yaml) to start a run, or --resume runs/<id> to continue one"
            )
        contract_path, run_profile = contract, _profile(profile)
        if not contract_path.is_file():
            raise UsageError(f"{contract_path}: no such contract file")
        return contract_path, run_profile
    try:
        log = read_run_log(resume)
        contract_path = resume_contract(resume, log, contract)
        if profile is not None and profile.value != log.profile:
            raise UsageError(f"{resume} runs with profile {log.profile}: leave out --profile {profile.value}")
        if log.profile == "gpu" and not _has_cuda():
            raise UsageError(
                f"{resume} runs with profile gpu, which needs a CUDA GPU, and this machine has none "
                "(torch.cuda.is_available() is False)"
            )
    except UsageError as err:
        raise UsageError(f"--resume {err}") from None
    return contract_path, None


def _role_named_by(option: str, spec: str | None, kind: str, contract_path: Path):
    """The role the option names (None when left out: the Dispatcher resolves it); a bad spec is a
    UsageError quoting the option."""
    from ferret.roles.resolve import resolve_role

    return None if spec is None else resolve_role(kind, spec, contract_path=contract_path, option=option)[0]


def _run_result_json(log: RunLog) -> str:
    """The RUN_RESULT object: how the run ended, who played each role, and the best candidate's file."""
    return json.dumps(
        {
            "run_id": log.run_id,
            "status": log.status,
            "stop": log.stop.value if log.stop else None,
            "stop_reason": log.stop_reason,
            "optimizer": log.optimizer,
            "reviewer": log.reviewer,
            "test_writer": log.test_writer,
            "extra_cases": log.extra_cases,
            "established": log.established.model_dump(),
            "best": log.best.file if log.best else None,
        }
    )


def _dispatch_exit_code(log: RunLog) -> int:
    """The exit code of a finished or stopped run (the log is saved either way), from its status and its
    typed stop reason, never from the wording of `stop_reason`."""
    from ferret.dispatch.runlog import StopReason

    if log.stop == StopReason.INTERRUPTED and log.interrupted_by is not None:  # which signal stopped the run
        return 128 + log.interrupted_by
    if log.status in ("accepted", "correct_speed_not_measured", "correct_static_review_only"):
        return EXIT_PASS
    if log.stop == StopReason.GATE_TAMPERED:
        return EXIT_TAMPERED
    return EXIT_FAIL if log.status == "rejected" else EXIT_INCOMPLETE


template_app = typer.Typer(no_args_is_help=True, help="The offline optimizer's kernel templates (tasks/<op>/templates).")
app.add_typer(template_app, name="template")


def _template_value(text: str, values: list):
    """`text` as one of `values` (YAML-typed: 32 is an int, true a bool), or a usage error listing them."""
    import yaml

    value = yaml.safe_load(text)
    if value not in values:
        raise typer.BadParameter(f"{text!r} is not one of {values}")
    return value


@template_app.command("render", epilog=_epilog("the candidate's source, or with --out the file written"))
def template_render(
    templates: Path = typer.Argument(..., help="tasks/<op>/templates (holding space.yaml)", file_okay=False),
    assignments: list[str] = typer.Option([], "--set", help="name=value, changing one parameter of the default point."),
    out: Path | None = typer.Option(None, "--out", help="Write the candidate here instead of stdout."),
) -> None:
    """Render one point of a kernel template as a candidate file (the default point unless --set says otherwise)."""

    def action():
        from ferret.roles.offline import TemplateSearchOptimizer

        if not (templates / "space.yaml").is_file():
            raise UsageError(
                f"{templates} holds no space.yaml: TEMPLATES is a folder tasks/<op>/templates with space.yaml "
                "and the kernel template"
            )
        optimizer = TemplateSearchOptimizer(templates)
        point = dict(optimizer.space.default)
        for assignment in assignments:
            name, sep, text = assignment.partition("=")
            if not sep or name not in optimizer.space.parameters:
                raise typer.BadParameter(
                    f"--set {assignment!r}: expected name=value with name one of {list(optimizer.space.parameters)}"
                )
            point[name] = _template_value(text, optimizer.space.parameters[name])
        source = optimizer.render(point)
        _progress(f"point {optimizer.approach(point)}")
        if out is None:
            typer.echo(source, nl=False)
        else:
            out.write_text(source)
            typer.echo(str(out))

    _guarded(action)


@app.command("new", epilog=_epilog("the files written, one a line"))
def new_command(
    op: str = typer.Argument(..., metavar="<op>", help="The new op's name: a lowercase Python identifier."),
    root: Path = typer.Option(Path("."), "--root", file_okay=False, help="The project's root (holds contracts/, tasks/)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the example's files where they exist."),
    calibrate_tolerances: bool = typer.Option(
        True, "--calibrate/--no-calibrate", help="Derive the tolerance table (ferret calibrate, CPU profile)."
    ),
    quantized: bool = typer.Option(
        False,
        "--quantized",
        help="Store `up` quantized: float8 e4m3 codes and one float32 scale per 128 values (the contract's `scales`).",
    ),
) -> None:
    """Scaffold a new op from a working example (a fused SiLU-and-mul named <op>): contract, tolerances,
    reference, baseline, an honest and a wrong Triton candidate, and their tests, which pass as written.
    With --quantized the example declares quantized storage, and its wrong candidate ignores the scales."""

    def action():
        from ferret.scaffold.new_op import new_op

        made = new_op(op, root, force=force, calibrate_tolerances=calibrate_tolerances, progress=_reporter(), quantized=quantized)
        for path in made.files:
            typer.echo(str(path))
        _progress(
            f"next: pytest {root / 'tests' / 'tasks' / op}; ferret check {made.contract} {made.honest}; "
            "contracts/README.md turns the example into your op"
        )

    _guarded(action)


@app.command("calibrate", epilog=_epilog("the tolerance table file written"))
def calibrate_command(
    contract: Path = _contract_argument(),
    seeds: int = typer.Option(16, help="Seeds per case drawn to measure the honest error."),
    margin: float = typer.Option(4.0, help="Tolerance = largest honest error x margin."),
    check_seeds: int = typer.Option(8, help="Fresh seeds per case to measure the false-rejection rate."),
    candidates: list[Path] = typer.Option(
        [], "--candidate", exists=True, dir_okay=False, help="Honest candidates whose false-rejection rate is measured."
    ),
    profile: Profile = _profile_option(Profile.cpu),
    force: bool = typer.Option(False, "--force", help="Write the table even where it loosens a bound of the existing file."),
) -> None:
    """Derive the contract's tolerance table from the error of an honest implementation against float64.

    Over an existing table file, each changed bound is listed (old -> new); a table that loosens any bound
    is refused (exit 2, nothing written) unless --force."""

    def action():
        from ferret.gate.calibrate import calibrate

        path = calibrate(
            contract,
            seeds=seeds,
            margin=margin,
            check_seeds=check_seeds,
            candidates=candidates,
            profile=_profile(profile),
            progress=_reporter(),
            force=force,
        )
        typer.echo(str(path))

    _guarded(action)


@app.command("report", epilog=_epilog("the two files written, report.html and report.md, one a line"))
def report_command(
    folder: Path = typer.Argument(..., help="gates/<hash> or runs/<id>"),
    out: Path | None = typer.Option(
        None,
        "--out",
        file_okay=False,
        help="Where to write them. Default: a run's own folder; for a gate, gates/<hash>.report beside it (a gate is locked).",
    ),
    gates_dir: Path = _gates_dir_option(),
) -> None:
    """Write a self-contained HTML page (report.html) and a Markdown summary (report.md) of a gate's verdicts
    or of a run: verdicts, parts, errors against tolerances, detections, timing against the floor."""

    def action():
        from ferret.reporting import write_report

        files = write_report(folder, out=out, gates_dir=gates_dir)
        typer.echo(str(files.html))
        typer.echo(str(files.markdown))

    _guarded(action)


@app.command("schema", epilog=_epilog("the schema files written, one a line"))
def schema_command(out: Path = typer.Option(Path("contracts/schema"), "--out", file_okay=False)) -> None:
    """Write the JSON schemas of the contract, gate manifest, verdict, report and a dispatch's run log."""

    def action():
        from ferret.audit.models import AuditRecord
        from ferret.contract.model import Contract
        from ferret.dispatch.runlog import RunLog
        from ferret.gate.models import GateManifest, Report, Verdict

        out.mkdir(parents=True, exist_ok=True)
        models = (
            ("contract", Contract),
            ("gate_manifest", GateManifest),
            ("verdict", Verdict),
            ("report", Report),
            ("run_log", RunLog),
            ("audit", AuditRecord),
        )
        for name, model in models:
            path = out / f"{name}.schema.json"
            path.write_text(json.dumps(model.model_json_schema(), indent=1, sort_keys=True) + "\n")
            typer.echo(str(path))

    _guarded(action)


@app.command("export", epilog=_epilog("the package folder written, <out>/ferret_<op>"))
def export_command(
    candidate: Path = typer.Argument(..., help="A candidate file that passes the contract's gate."),
    contract: Path = typer.Option(..., "--contract", help="contracts/<op>.yaml", dir_okay=False),
    out: Path = typer.Option(..., "--out", file_okay=False, help="Where the package folder ferret_<op>/ is written."),
    gates_dir: Path = _gates_dir_option(),
    profile: Profile | None = _profile_option(),
) -> None:
    """Write an importable package that registers the kernel as torch.ops.ferret.<op> (torch.library.custom_op,
    with a fake implementation; every call checked against the contract). Only a candidate that passes the current
    gate is exported: a pass on record is used, else the check runs now; a failing candidate is exit 2."""

    def action():
        from ferret.export.export import export_candidate

        if candidate.is_dir():
            raise UsageError(f"{candidate} is a folder: CANDIDATE is one Python file following the contract's ABI")
        exported = export_candidate(contract, candidate, out, gates_dir, _profile(profile), progress=_reporter())
        typer.echo(str(exported.folder))

    _guarded(action)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
