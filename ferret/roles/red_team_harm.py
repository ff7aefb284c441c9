"""A simple `Harm` for the red team: does a candidate err beyond the contract's tolerance on inputs the gate never
drew, called as production calls it?

`ReferenceHarm(task)` plans fresh cases of the profile with its own seeded generator (so they span every stratum
and edge the contract declares, as the gate's fresh cases do, with other values), draws them in every dtype, runs
the float64 reference, and runs the candidate in a plain Python process (`python -c`, no judge, no sandbox, the
caller's HOME and PATH, a temporary working folder; on the profile's device, the CPU one under Triton's
interpreter): harmful when any output's relative L2 error or its largest
error relative to the reference's peak exceeds the contract's tolerance, when it is not finite where the reference
is (or finite where it is not), or when the process fails. Run it only on files the gate has already judged: it
does not confine them.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ferret.contract.model import Case, ProfileName
from ferret.contract.task import Task
from ferret.gate.fresh import plan_fresh_cases
from ferret.gate.inputs import draw_inputs, output_specs

# The candidate's production call: the module loaded under its file's stem, outputs allocated filled with NaN.
_CALLER = """
import importlib.util, sys, torch
job, out = torch.load(sys.argv[1], weights_only=False), sys.argv[2]
spec = importlib.util.spec_from_file_location(job["stem"], job["candidate"])
module = importlib.util.module_from_spec(spec)
sys.modules[job["stem"]] = module
device = job["device"]
if device == "cpu":  # the interpreter as the candidates' processes get it (ferret/sandbox/interpreter.py)
    sys.path.insert(0, job["ferret_root"])  # this ferret, whatever the environment has installed
    from ferret.sandbox.interpreter import prepare_interpreter
    sys.path.remove(job["ferret_root"])
    prepare_interpreter()
spec.loader.exec_module(module)
answers = []
for call in job["calls"]:
    inputs = {k: v.to(device) for k, v in call["inputs"].items()}
    outputs = {k: torch.full(shape, float("nan"), dtype=dtype, device=device) for k, (shape, dtype) in call["outputs"].items()}
    module.run(inputs, outputs, dict(job["params"]))
    answers.append({k: v.cpu() for k, v in outputs.items()})
torch.save(answers, out)
"""


class ReferenceHarm:
    """`Harm`: a candidate file -> whether it errs beyond tolerance on independent inputs. `reasons` keeps why, by file."""

    def __init__(
        self,
        task: Task,
        profile: ProfileName = "cpu",
        seed: int = 20261207,
        timeout_s: float = 600,
        dtypes: list[str] | None = None,
    ):
        self.task = task
        self.profile: ProfileName = profile
        self.dtypes = dtypes or list(task.contract.dtypes)  # each independent case is run in each of these
        self.seed = seed
        self.timeout_s = timeout_s
        self.reasons: dict[str, str] = {}

    def cases(self) -> list[tuple[Case, str]]:
        """The independent case variants: the profile's fresh plan under this seed, each in every dtype."""
        rng = random.Random(self.seed)
        planned = [case for case, _ in plan_fresh_cases(self.task.contract, self.profile, rng)]
        seeded = [
            case.model_copy(update={"seed": rng.randrange(2**62), "name": f"independent{n}"}) for n, case in enumerate(planned, 1)
        ]
        return [(case, dtype) for case in seeded for dtype in self.dtypes]

    def __call__(self, candidate: Path) -> bool:
        contract = self.task.contract
        calls, references = [], []
        for case, dtype in self.cases():
            inputs = draw_inputs(contract, case, dtype)
            with torch.no_grad():
                stages = self.task.reference({k: v.clone() for k, v in inputs.items()}, dict(contract.params))
            references.append((case, dtype, {o.name: stages[o.name].detach().to(torch.float64) for o in contract.outputs}))
            calls.append({"inputs": inputs, "outputs": output_specs(contract, case, dtype)})
        answers = self._run(candidate, calls)
        if isinstance(answers, str):
            self.reasons[str(candidate)] = answers
            return True
        for (case, dtype, expected), answer in zip(references, answers, strict=True):
            for name, reference in expected.items():
                wrong = self._error(answer[name].to(torch.float64), reference, dtype, name)
                if wrong:
                    self.reasons[str(candidate)] = f"{case.name} {case.dims} @{dtype}, output {name}: {wrong}"
                    return True
        self.reasons[str(candidate)] = "within tolerance on every independent case"
        return False

    def _run(self, candidate: Path, calls: list[dict]) -> list[dict[str, torch.Tensor]] | str:
        """The candidate's answers to `calls`, or why there are none."""
        with tempfile.TemporaryDirectory(prefix="red-team-harm-") as folder:
            job, out = Path(folder) / "job.pt", Path(folder) / "answers.pt"
            params = dict(self.task.contract.params)
            device = "cuda" if self.profile == "gpu" else "cpu"
            torch.save(
                {
                    "stem": candidate.stem,
                    "candidate": str(candidate.resolve()),
                    "calls": calls,
                    "params": params,
                    "device": device,
                    "ferret_root": str(Path(__file__).resolve().parents[2]),
                },
                job,
            )
            keep = ("PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
            env = {k: os.environ[k] for k in keep if k in os.environ}
            if device == "cpu":  # the CPU profile's production: Triton under its interpreter, on CPU tensors
                env["TRITON_INTERPRET"] = "1"
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _CALLER, str(job), str(out)],
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return f"no answer within {self.timeout_s} s"
            if done.returncode != 0:
                return f"the call failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
            return torch.load(out, weights_only=False)

    def _error(self, answer: torch.Tensor, reference: torch.Tensor, dtype: str, stage: str) -> str:
        """Why `answer` is beyond the tolerance of `stage` in `dtype`, or "" when it is within."""
        finite = torch.isfinite(reference)
        if not torch.equal(torch.isfinite(answer), finite):
            return "not finite where the reference is, or finite where it is not"
        if not bool(finite.any()):
            return ""
        tolerance = self.task.contract.tolerance(dtype, stage)
        diff, ref = (answer - reference)[finite], reference[finite]
        floor = tolerance.scale_floor or 0.0
        scale = max(float(ref.norm()), floor * ref.numel() ** 0.5, 1e-300)
        peak = max(float(ref.abs().max()), floor, tolerance.peak_floor or 0.0, 1e-300)
        rel_l2, rel_peak = float(diff.norm()) / scale, float(diff.abs().max()) / peak
        if tolerance.rel_l2 is not None and rel_l2 > tolerance.rel_l2:
            return f"rel_l2 {rel_l2:.3g} > {tolerance.rel_l2:.3g}"
        if tolerance.max_abs_rel_peak is not None and rel_peak > tolerance.max_abs_rel_peak:
            return f"max_abs_rel_peak {rel_peak:.3g} > {tolerance.max_abs_rel_peak:.3g}"
        return ""
