"""A new op in minutes: `ferret new <op>` writes a working example under the project's root, a fused
SiLU-and-mul named `<op>`, that a user turns into their own op:

    contracts/<op>.yaml                      the contract (every field commented where to change it)
    contracts/<op>.tolerances.yaml           derived by `ferret calibrate` from the honest implementations
    tasks/<op>/reference.py, baseline.py     the float64 truth and the eager baseline
    tasks/<op>/candidates/triton_<op>.py     a first honest Triton candidate
    tasks/<op>/candidates/wrong_<op>.py      a wrong one, which the generated gate must reject
    tests/tasks/<op>/test_<op>_task.py       their tests, passing as generated

With `--quantized` (`quantized=True`) the same op stores `up` quantized, as an FP8 weight or cache is: float8 e4m3
codes with one float32 scale per 128 values of a row (the input `up_scale`, declared by the contract's `scales`).
The reference dequantizes in float64, the Triton candidate in registers, and the wrong candidate ignores the scale.

Nothing is overwritten unless asked; the op's name must be a Python identifier (it names a package)."""

from __future__ import annotations

import keyword
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

from ferret.errors import UsageError

_WRONG = "wrong_candidate.py.j2"  # the plain example's mistake (a dropped tail); --quantized has its own
_TEMPLATES = {  # file under the project's root -> its template
    "contracts/{op}.yaml": "contract.yaml.j2",
    "tasks/{op}/__init__.py": None,
    "tasks/{op}/reference.py": "reference.py.j2",
    "tasks/{op}/baseline.py": "baseline.py.j2",
    "tasks/{op}/candidates/triton_{op}.py": "triton_candidate.py.j2",
    "tasks/{op}/candidates/wrong_{op}.py": _WRONG,
    "tests/tasks/{op}/test_{op}_task.py": "test_task.py.j2",
}


@dataclass(frozen=True)
class NewOp:
    """What `new_op` wrote: every file, and the contract and candidates by name."""

    files: list[Path]
    contract: Path
    honest: Path
    wrong: Path
    tolerances: Path | None


def new_op(
    op: str,
    root: Path,
    force: bool = False,
    calibrate_tolerances: bool = True,
    progress: Callable[[str], None] = lambda m: None,
    quantized: bool = False,
) -> NewOp:
    """Write the example op's files under `root`, then derive its tolerance table (`ferret calibrate`, CPU
    profile, the honest Triton candidate's false-rejection rate measured too). UsageError naming the op
    or the first file in the way."""
    if not op.isidentifier() or keyword.iskeyword(op) or not op.islower():
        raise UsageError(f"op {op!r}: the name must be a lowercase Python identifier (it names tasks/{op}/)")
    targets = {pattern.format(op=op): template for pattern, template in _TEMPLATES.items()}
    existing = [name for name in targets if (root / name).exists()]
    if existing and not force:
        raise UsageError(f"{root / existing[0]}: already exists (ferret new --force overwrites the example's files)")
    environment = Environment(
        loader=PackageLoader("ferret.scaffold", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    written = []
    for name, template in targets.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        ignores_scale = quantized and template == _WRONG
        if ignores_scale:  # the quantized example's mistake: the honest kernel of unquantized storage, handed the codes
            template = "triton_candidate.py.j2"
        context = {"op": op, "quantized": quantized, "ignores_scale": ignores_scale}
        path.write_text(environment.get_template(template).render(**context) if template else "")
        written.append(path)
    for package in (root / "tasks" / "__init__.py",):  # the project's `tasks` package, where a new project lacks it
        if not package.exists():
            package.write_text("")
            written.append(package)
    contract = root / "contracts" / f"{op}.yaml"
    honest = root / "tasks" / op / "candidates" / f"triton_{op}.py"
    tolerances = None
    if calibrate_tolerances:
        progress(f"deriving {op}'s tolerances from its honest implementations (ferret calibrate, CPU profile)")
        tolerances = _calibrate_in_the_project(root, contract, honest, force)
        written.append(tolerances)
    return NewOp(
        files=written,
        contract=contract,
        honest=honest,
        wrong=root / "tasks" / op / "candidates" / f"wrong_{op}.py",
        tolerances=tolerances,
    )


def _calibrate_in_the_project(root: Path, contract: Path, honest: Path, force: bool) -> Path:
    """`ferret calibrate` in a fresh interpreter whose working folder is the project's root: the project's
    `tasks` package is imported there, never one the calling process already imported (Ferret's own). With
    `force` (ferret new --force) the example's table is rewritten even where it loosens the one there."""
    command = [
        sys.executable,
        "-m",
        "ferret.cli.main",
        "calibrate",
        str(contract.resolve()),
        "--seeds",
        "4",
        "--check-seeds",
        "2",
        "--candidate",
        str(honest.resolve()),
        *(["--force"] if force else []),
    ]
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"{contract}: ferret calibrate failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    return Path(done.stdout.strip().splitlines()[-1])
