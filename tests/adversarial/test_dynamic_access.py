"""Reaching what the scan bans through a computed name (docs/cheats.md 29): `getattr` with a name built at run time,
a namespace read as a dict, `operator.attrgetter`, `__builtins__["__import__"]`, `torch.ops.aten`, a `torch.library`
operator, a module re-exported by another. Each `u3_*` candidate computes RMSNorm with torch by such a path and
writes it with a real Triton copy kernel: the ATen watch names it at run time whatever the path (`library_call`), and
the scan names where the path was hidden (`dynamic_access`, with file and line). The honest candidates, and a
launcher that does host work that is no cheat, stay clean.
"""

from __future__ import annotations

import ast
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT  # noqa: E402

from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.integrity.scan import scan_file, scan_source  # noqa: E402

HERE = Path(__file__).resolve().parent
CHEATING = sorted((HERE / "candidates").glob("u3_*.py"))
HONEST_TASKS = sorted(p for p in REPO.glob("tasks/*/candidates/*.py") if p.name != "__init__.py")


def constants(path: Path) -> dict:
    found = {}
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                found[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
    return found


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    gates = tmp_path_factory.mktemp("dynamic-access-gates")
    build_gate(RMSNORM_CONTRACT, gates_dir=gates, profile="cpu")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {p.name: pool.submit(check, RMSNORM_CONTRACT, p, gates, profile="cpu") for p in CHEATING}
        yield {name: future.result()[0] for name, future in futures.items()}


def _describe(verdict) -> str:
    return "\n".join(f"  {d.cheat} [{d.source}] {d.evidence[:240]}" for d in verdict.detections)


@pytest.mark.parametrize("candidate", CHEATING, ids=[p.stem for p in CHEATING])
def test_a_computed_path_to_torch_is_rejected_and_named(candidate, verdicts):
    verdict = verdicts[candidate.name]
    expected = constants(candidate)
    assert not verdict.passed, _describe(verdict)
    seen = {d.cheat for d in verdict.detections}
    assert expected["EXPECTED_CHEATS"] <= seen, _describe(verdict)
    at_run_time = {d.cheat for d in verdict.detections if d.source == "runtime"}
    assert expected["EXPECTED_RUNTIME"] <= at_run_time, _describe(verdict)
    static = [d for d in verdict.detections if d.cheat == "dynamic_access"]
    assert all(d.source == "static" and d.file == candidate.name and d.line for d in static), _describe(verdict)


@pytest.mark.quick
@pytest.mark.parametrize("candidate", CHEATING, ids=[p.stem for p in CHEATING])
def test_the_scan_names_where_the_path_was_hidden(candidate):
    found = [f for f in scan_file(candidate).findings if f.cheat == "dynamic_access"]
    assert found and all(f.catalogue == [29] for f in found)


@pytest.mark.quick
@pytest.mark.parametrize("path", HONEST_TASKS, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_honest_candidates_have_no_dynamic_access(path):
    assert [f for f in scan_file(path).findings if f.cheat in ("dynamic_access", "host_numerics")] == []


_SNIPPETS = {
    "getattr_concat": ('z = getattr(torch, "mat" + "mul")', True),
    "getattr_variable": ("name = 'softmax'\nz = getattr(torch, name)", True),
    "setattr_computed": ('setattr(torch, "x" + "y", 1)', True),
    "getattr_handed_on": ('import functools\nz = functools.reduce(getattr, ["nn", "functional"], torch)', True),
    "vars_subscript": ('z = vars(torch)["softmax"]', True),
    "module_dict": ('z = torch.__dict__["softmax"]', True),
    "attrgetter": ('import operator\nz = operator.attrgetter("nn.functional.softmax")(torch)', True),
    "from_operator_attrgetter": ('from operator import attrgetter\nz = attrgetter("nn")(torch)', True),
    "getattribute": ('z = torch.__getattribute__("softmax")', True),
    "object_getattribute": ('z = object.__getattribute__(torch, "softmax")', True),
    "builtins_import": ('z = __builtins__["__import__"]("torch.nn")', True),
    "reexported_torch": ("import torch.backends.cuda\nz = torch.backends.cuda.torch", True),
    "reexported_numpy": ("import triton.runtime.interpreter as interp\nz = interp.np", True),
    "getattr_literal": ('z = getattr(triton, "cdiv")', False),
    "submodule": ("import triton.language as tl2\nz = tl2.math", False),
    "torch_cuda_query": ("z = torch.cuda.is_available()", False),
}


@pytest.mark.quick
@pytest.mark.parametrize("name", sorted(_SNIPPETS))
def test_dynamic_access_snippets(name):
    code, flagged = _SNIPPETS[name]
    source = "import torch\nimport triton\n\n\ndef run(inputs, outputs, params, trace=None):\n"
    source += "".join(f"    {line}\n" for line in code.splitlines())
    found = [f for f in scan_source(source, "snippet.py").findings if f.cheat == "dynamic_access"]
    assert bool(found) == flagged, [f.message for f in found]
    assert all(f.line > 5 and f.catalogue == [29] for f in found)  # on the snippet's own lines, in run
