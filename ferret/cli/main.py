"""`ferret` on the command line.

Exit codes: 0 pass, 1 fail, 2 bad usage or bad contract, 3 tampered gate, 4 internal error of the judge.
Progress goes to stderr; `ferret check` prints one `GATE_RESULT {json}` line on stdout.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Ferret: kernels written by agents, judged by a locked gate.")
gate_app = typer.Typer(no_args_is_help=True, help="Build and verify locked gates.")
app.add_typer(gate_app, name="gate")

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_TAMPERED, EXIT_INTERNAL = 0, 1, 2, 3, 4


def _progress(message: str) -> None:
    typer.echo(f"ferret: {message}", err=True)


def _guarded(action):
    """Run `action`, mapping every failure class to its documented exit code and a one-line reason."""
    from ferret.contract.load import ContractError
    from ferret.gate.lock import GateTampered

    try:
        return action()
    except ContractError as err:
        typer.echo(f"ferret: bad contract: {err}", err=True)
        raise typer.Exit(EXIT_USAGE)
    except FileNotFoundError as err:
        typer.echo(f"ferret: {err}", err=True)
        raise typer.Exit(EXIT_USAGE)
    except GateTampered as err:
        typer.echo(f"ferret: TAMPERED: {err}", err=True)
        raise typer.Exit(EXIT_TAMPERED)
    except typer.BadParameter as err:
        typer.echo(f"ferret: {err}", err=True)
        raise typer.Exit(EXIT_USAGE)
    except typer.Exit:
        raise
    except Exception as err:  # noqa: BLE001 - anything else is the judge's own fault: say so, exit 4
        traceback.print_exc()
        typer.echo(f"ferret: internal error: {type(err).__name__}: {err}", err=True)
        raise typer.Exit(EXIT_INTERNAL)


def _profile_option():
    return typer.Option(None, "--profile", help="Case profile: cpu (small, interpreter) or gpu (production). Default: gpu if a GPU is present.")


@gate_app.command("build")
def gate_build(
    contract: Path = typer.Argument(..., help="contracts/<op>.yaml"),
    gates_dir: Path = typer.Option(Path("gates"), "--gates-dir"),
    profile: Optional[str] = _profile_option(),
) -> None:
    """Build (or reuse) the locked gate of a contract: inputs and golden stages from the canonical reference."""

    def action():
        from ferret.gate.build import build_gate
        from ferret.gate.platform_info import default_profile

        gate = build_gate(contract, gates_dir, profile or default_profile(), progress=_progress)
        typer.echo(str(gate))

    _guarded(action)


@gate_app.command("verify")
def gate_verify(gate: Path = typer.Argument(..., help="gates/<hash>")) -> None:
    """Exit 0 if every byte of the gate matches its lock; exit 3 naming each changed, missing or added file."""

    def action():
        from ferret.gate.lock import verify_gate

        if not gate.is_dir():
            raise FileNotFoundError(f"{gate}: no such gate folder")
        manifest = verify_gate(gate)
        typer.echo(f"intact: {gate.name} ({len(manifest['files'])} files, op {manifest['op']}, profile {manifest['profile']})")

    _guarded(action)


@app.command("check")
def check_command(
    contract: Path = typer.Argument(..., help="contracts/<op>.yaml"),
    candidate: Path = typer.Argument(..., help="A candidate file following the contract's ABI."),
    gates_dir: Path = typer.Option(Path("gates"), "--gates-dir"),
    profile: Optional[str] = _profile_option(),
    speed: bool = typer.Option(True, "--speed/--no-speed", help="Time a correct candidate against the baseline (GPU)."),
) -> None:
    """Judge a candidate: build or reuse the gate, verify it, run the candidate on inputs only, decide."""

    def action():
        from ferret.gate.judge import check, summary

        verdict, gate = check(contract, candidate, gates_dir, profile, progress=_progress, measure_speed=speed)
        typer.echo("GATE_RESULT " + json.dumps(summary(verdict), default=str))
        _progress(f"{'PASS' if verdict.passed else 'FAIL'}; report: {gate / 'report.json'}")
        raise typer.Exit(EXIT_PASS if verdict.passed else EXIT_FAIL)

    _guarded(action)


EXIT_INCOMPLETE = 6


@app.command("dispatch")
def dispatch_command(
    contract: Path = typer.Argument(..., help="contracts/<op>.yaml"),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="template-search, or a model spec: anthropic:MODEL, claude-cli, openai:URL:MODEL. Default: an LLM if one is reachable, else template-search."),
    reviewer: Optional[str] = typer.Option(None, "--reviewer", help="static, or a model spec. Default: an LLM if reachable, else static."),
    test_writer: Optional[str] = typer.Option(
        None, "--test-writer", help="contract-cases (no extra cases), or a model spec for the adviser that proposes extra gate cases. Default: an LLM if reachable."
    ),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", min=1, help="Overrides the contract's budgets.max_rounds."),
    proposals_per_round: Optional[int] = typer.Option(
        None, "--proposals-per-round", min=1, help="Overrides the contract's budgets.proposals_per_round."
    ),
    gates_dir: Path = typer.Option(Path("gates"), "--gates-dir"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir"),
    profile: Optional[str] = _profile_option(),
    resume: Optional[Path] = typer.Option(None, "--resume", help="runs/<id> of an interrupted run to continue."),
) -> None:
    """Run the loop: test-writer, locked gate, optimizer rounds judged by the gate and reviewed, final check.

    Exit codes: 0 accepted or correct (see the status), 1 rejected, 2 bad contract, 3 gate tampered, 6 incomplete.
    """

    def action():
        from ferret.dispatch.dispatcher import Dispatcher
        from ferret.models.base import ModelUnavailable
        from ferret.roles import factory

        def role(option: str, spec: str | None, make):
            if spec is None:
                return None
            try:
                return make(spec, contract)
            except (ValueError, ModelUnavailable) as err:
                raise typer.BadParameter(f"{option} {spec!r}: {err}") from None

        optimizer_role = role("--optimizer", optimizer, factory.make_optimizer)
        reviewer_role = role("--reviewer", reviewer, factory.make_reviewer)
        test_writer_role = role("--test-writer", test_writer, factory.make_test_writer)
        dispatcher = Dispatcher(
            contract,
            optimizer=optimizer_role,
            reviewer=reviewer_role,
            gates_dir=gates_dir,
            runs_dir=runs_dir,
            profile=profile,
            max_rounds=max_rounds,
            progress=_progress,
            proposals_per_round=proposals_per_round,
            test_writer=test_writer_role,
        )
        log = dispatcher.run(resume=resume)
        typer.echo("RUN_RESULT " + json.dumps({"run_id": log.run_id, "status": log.status, "stop_reason": log.stop_reason,
                                               "optimizer": log.optimizer, "reviewer": log.reviewer,
                                               "test_writer": log.test_writer, "extra_cases": log.extra_cases,
                                               "established": log.established.model_dump(),
                                               "best": log.best.file if log.best else None}))
        if log.status in ("accepted", "correct_speed_not_measured", "correct_static_review_only"):
            raise typer.Exit(EXIT_PASS)
        if "gate tampered" in log.stop_reason:
            raise typer.Exit(EXIT_TAMPERED)
        raise typer.Exit(EXIT_FAIL if log.status == "rejected" else EXIT_INCOMPLETE)

    _guarded(action)


template_app = typer.Typer(no_args_is_help=True, help="The offline optimizer's kernel templates (tasks/<op>/templates).")
app.add_typer(template_app, name="template")


def _template_value(text: str, values: list):
    """`text` as one of `values` (YAML-typed: 32 is an int, true a bool), or a usage error listing them."""
    import yaml

    value = yaml.safe_load(text)
    if value not in values:
        raise typer.BadParameter(f"{text!r} is not one of {values}")
    return value


@template_app.command("render")
def template_render(
    templates: Path = typer.Argument(..., help="tasks/<op>/templates (holding space.yaml)"),
    assignments: list[str] = typer.Option([], "--set", help="name=value, changing one parameter of the default point."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the candidate here instead of stdout."),
) -> None:
    """Render one point of a kernel template as a candidate file (the default point unless --set says otherwise)."""

    def action():
        from ferret.roles.offline import TemplateSearchOptimizer

        optimizer = TemplateSearchOptimizer(templates)
        point = dict(optimizer.space.default)
        for assignment in assignments:
            name, sep, text = assignment.partition("=")
            if not sep or name not in optimizer.space.parameters:
                raise typer.BadParameter(f"--set {assignment!r}: expected name=value with name one of {list(optimizer.space.parameters)}")
            point[name] = _template_value(text, optimizer.space.parameters[name])
        source = optimizer.render(point)
        _progress(f"point {optimizer.approach(point)}")
        if out is None:
            typer.echo(source, nl=False)
        else:
            out.write_text(source)
            typer.echo(str(out))

    _guarded(action)


@app.command("calibrate")
def calibrate_command(
    contract: Path = typer.Argument(..., help="contracts/<op>.yaml"),
    seeds: int = typer.Option(16, help="Seeds per case drawn to measure the honest error."),
    margin: float = typer.Option(4.0, help="Tolerance = largest honest error x margin."),
    check_seeds: int = typer.Option(8, help="Fresh seeds per case to measure the false-rejection rate."),
    candidates: list[Path] = typer.Option([], "--candidate", help="Honest candidates whose false-rejection rate is measured."),
    profile: str = typer.Option("cpu", "--profile"),
) -> None:
    """Derive the contract's tolerance table from the error of an honest implementation against float64."""

    def action():
        from ferret.gate.calibrate import calibrate

        path = calibrate(contract, seeds=seeds, margin=margin, check_seeds=check_seeds, candidates=candidates,
                         profile=profile, progress=_progress)
        typer.echo(str(path))

    _guarded(action)


@app.command("schema")
def schema_command(out: Path = typer.Option(Path("contracts/schema"), "--out")) -> None:
    """Write the JSON schemas of the contract, gate manifest, verdict and report."""
    from ferret.contract.model import Contract
    from ferret.gate.models import GateManifest, Report, Verdict

    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("contract", Contract), ("gate_manifest", GateManifest), ("verdict", Verdict), ("report", Report)):
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(model.model_json_schema(), indent=1, sort_keys=True) + "\n")
        typer.echo(str(path))


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
