"""The judge end to end on rmsnorm (CPU profile): honest candidates pass, each kind of cheat or failure
fails for the right reason, nothing is lost after a crash, and every verdict lands in report.json."""

from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import (  # noqa: E402
    RMSNORM_BASELINE,
    RMSNORM_CONTRACT,
    TRITON_RMSNORM,
    copy_gate,
    unnamed_rejection,
    write_contract,
)

from ferret.gate.judge import check, summary  # noqa: E402
from ferret.gate.lock import verify_gate  # noqa: E402
from ferret.gate.models import PARTS, GateManifest  # noqa: E402
from ferret.gate.report import read_report, read_verdicts  # noqa: E402

# Variants of the CPU profile, in gate order (correctness cases in 3 dtypes, edge cases in bfloat16).
VARIANTS = [
    "typical@bfloat16", "typical@float16", "typical@float32",
    "odd_width@bfloat16", "odd_width@float16", "odd_width@float32",
    "hidden_7168@bfloat16", "hidden_7168@float16", "hidden_7168@float32",
    "single_element@bfloat16", "zero_rows@bfloat16", "inf_and_nan@bfloat16", "many_rows_narrow@bfloat16",
]  # fmt: skip
EDGE = "single_element@bfloat16"  # the variant the crash/hang/memory candidates fail on

# A correct pure-PyTorch RMSNorm every adversarial candidate starts from (candidates are single files).
PRELUDE = """
import torch


def rmsnorm(inputs, params):
    x = inputs["x"].to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + params["eps"])
    return x * inv_rms * inputs["weight"].to(torch.float32), inv_rms.squeeze(-1)


def honest(inputs, outputs, trace):
    # The honest Triton candidate's own launcher (appended below): an honest run launches real kernels.
    _triton_run(inputs, outputs, {"eps": 1e-6}, trace)
""" + TRITON_RMSNORM.read_text().replace("\ndef run(", "\ndef _triton_run(").replace("from __future__ import annotations\n", "")


def _candidate(tmp_path: Path, name: str, body: str, prelude: bool = True) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text((PRELUDE if prelude else "") + textwrap.dedent(body))
    return path


def _judge(contract: Path, candidate: Path, gates_dir: Path):
    verdict, gate = check(contract, candidate, gates_dir=gates_dir, profile="cpu")
    frozen = [r.id for r in verdict.variants if r.part != "fresh_cases"]
    fresh = [r.id for r in verdict.variants if r.part == "fresh_cases"]
    assert frozen == VARIANTS, "a verdict has a result for every variant"
    # and for the fresh private cases drawn for this check: its strata, edge edits and uniform draws (at least 3).
    assert len(fresh) >= 3 and fresh == [f"fresh{n}@bfloat16" for n in range(1, len(fresh) + 1)]
    # Every rejection names what it saw (and a pass names nothing): held for every verdict of this module.
    assert unnamed_rejection(verdict) is None, unnamed_rejection(verdict)
    return verdict, gate


def _named(verdict, cheat: str, variant: str | None = None):
    """The first detection of `cheat` (on `variant`, if given): it must be there."""
    found = [d for d in verdict.detections if d.cheat == cheat and (variant is None or d.variant == variant)]
    assert found, [(d.cheat, d.variant, d.evidence[:120]) for d in verdict.detections]
    return found[0]


def _by_id(verdict):
    return {r.id: r for r in verdict.variants}


@pytest.fixture(scope="module")
def judge(rmsnorm_gate, rmsnorm_gates_dir):
    """check() on the shared rmsnorm gate: it must find the gate already built, never build another."""

    def run(candidate: Path):
        verdict, gate = _judge(RMSNORM_CONTRACT, candidate, rmsnorm_gates_dir)
        assert gate == rmsnorm_gate
        return verdict

    return run


@pytest.fixture(scope="module")
def budget_contract(tmp_path_factory):
    """A copy of the rmsnorm contract with small budgets (timeout, memory), and its own gate."""
    from ferret.gate.build import build_gate

    root = tmp_path_factory.mktemp("budget-project")
    path = write_contract(
        root,
        lambda d: d["budgets"].update(case_timeout_s=20, check_timeout_s=600, candidate_memory_mb=1500),
        name="rmsnorm_budget.yaml",
        link_tasks=True,
    )
    gates_dir = root / "gates"
    build_gate(path, gates_dir=gates_dir, profile="cpu")
    return path, gates_dir


# --- honest candidates -------------------------------------------------------------------------------


@pytest.mark.quick
def test_honest_triton_candidate_passes(judge, rmsnorm_gate):
    verdict = judge(TRITON_RMSNORM)
    assert verdict.passed, summary(verdict)
    assert verdict.first_failing_stage is None
    assert {p: verdict.parts[p].status for p in PARTS} == {
        "correctness": "pass",
        "dtypes": "pass",
        "edge_cases": "pass",
        "fresh_cases": "pass",
        "determinism": "pass",
        "batch_invariance": "skipped",
        "integrity": "pass",
        "stress": "skipped",
    }
    assert "GPU" in verdict.parts["stress"].detail
    assert verdict.timing.measured is False
    assert "no GPU" in verdict.timing.reason and "not measured" in verdict.timing.reason
    assert verdict.gate_hash == rmsnorm_gate.name
    assert verdict.op == "rmsnorm" and verdict.profile == "cpu"
    for result in verdict.variants:
        assert result.passed and result.failure is None
        assert result.repeats_bitwise_equal and result.traced_equals_fast
        # The Triton candidate exposes inv_rms: both stages are compared.
        assert [(s.stage, s.exposed, s.passed) for s in result.stages] == [("inv_rms", True, True), ("y", True, True)]
        # Where the variant's seconds went in the candidate's process, the launch (no-op) check included.
        assert set(result.phase_seconds) == {"inputs", "first_call", "repeats", "traced", "noop", "to_host", "save"}
        assert sum(result.phase_seconds.values()) <= result.seconds + 1e-3  # each part rounded to 0.1 ms
    # The inf/NaN edge case really holds NaN in the golden output, and the candidate matched it.
    inf_nan = _by_id(verdict)["inf_and_nan@bfloat16"].stages[1]
    assert inf_nan.nonfinite_mismatches == 0


@pytest.mark.quick
def test_baseline_is_numerically_right_but_rejected_as_a_library_call(judge):
    # The eager baseline computes the right numbers with PyTorch ops and launches no Triton kernel: as
    # a candidate of a Triton contract that is docs/cheats.md 8 and 9, and the integrity part says so.
    verdict = judge(RMSNORM_BASELINE)
    assert {p: verdict.parts[p].status for p in ("correctness", "dtypes", "edge_cases", "determinism")} == dict.fromkeys(
        ("correctness", "dtypes", "edge_cases", "determinism"), "pass"
    )
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    assert {"library_call", "decoy_kernel"} <= {d.cheat for d in verdict.detections}


# --- candidates that fail to run ---------------------------------------------------------------------


def test_raising_candidate(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "raises",
        """
        def run(inputs, outputs, params, trace=None):
            raise RuntimeError("ferret-test: deliberate failure")
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    for result in verdict.variants:
        assert not result.passed
        assert result.failure.kind == "exception"
        assert "RuntimeError: ferret-test: deliberate failure" in result.failure.message
        assert "deliberate failure" in result.failure.traceback
    for part in ("correctness", "dtypes", "edge_cases", "determinism"):
        assert verdict.parts[part].status == "fail"
    assert "deliberate failure" in verdict.parts["correctness"].detail
    assert verdict.timing.measured is False
    raised = _named(verdict, "exception", VARIANTS[0])
    assert raised.source == "run" and raised.catalogue == [] and "deliberate failure" in raised.evidence


def test_syntax_error_is_reported_once_and_nothing_else_runs(judge, tmp_path):
    candidate = _candidate(tmp_path, "syntax", "def run(inputs, outputs, params, trace=None:\n    pass\n", prelude=False)
    verdict = judge(candidate)
    assert not verdict.passed
    first, *rest = verdict.variants
    assert first.failure.kind == "exception"
    assert "cannot load the candidate" in first.failure.message and "SyntaxError" in first.failure.message
    assert rest and all(r.failure.kind == "not_run" and first.id in r.failure.message for r in rest)
    assert sum("SyntaxError" in (r.failure.message or "") for r in verdict.variants) == 1, "said once"
    assert verdict.fault is not None and verdict.fault.kind == "exception" and verdict.fault.variant == first.id
    assert verdict.fault.not_run == [r.id for r in rest]
    assert "not run" in verdict.parts["dtypes"].detail and verdict.parts["dtypes"].status == "fail"
    assert summary(verdict).as_json()["fault"]["variant"] == first.id
    assert "SyntaxError" in _named(verdict, "exception", first.id).evidence


def test_missing_entry_fails_at_load(judge, tmp_path):
    candidate = _candidate(tmp_path, "no_entry", "def forward(inputs, outputs, params, trace=None):\n    pass\n", prelude=False)
    verdict = judge(candidate)
    assert verdict.variants[0].failure.kind == "exception" and "cannot load the candidate" in verdict.variants[0].failure.message
    assert all(r.failure.kind == "not_run" for r in verdict.variants[1:])
    assert "cannot load the candidate" in _named(verdict, "exception", VARIANTS[0]).evidence


CRASH_ON_EDGE = """
    import os


    def run(inputs, outputs, params, trace=None):
        if tuple(inputs["x"].shape) == (1, 1):
            {crash}
        honest(inputs, outputs, trace)
"""


def _fault_on_edge(verdict, kind: str):
    """The fault is charged to the edge variant, said once on the verdict; the variants before it ran and
    passed, the ones after it were not run (no restart at full budget for each of them)."""
    results = _by_id(verdict)
    order = [r.id for r in verdict.variants]
    after = order[order.index(EDGE) + 1 :]
    assert not verdict.passed
    assert results[EDGE].failure.kind == kind, results[EDGE].failure
    assert all(results[v].passed for v in order[: order.index(EDGE)]), summary(verdict)
    assert after and all(results[v].failure.kind == "not_run" and EDGE in results[v].failure.message for v in after)
    assert verdict.fault.kind == kind and verdict.fault.variant == EDGE and verdict.fault.not_run == after
    assert verdict.parts["correctness"].status == "pass"
    assert verdict.parts["edge_cases"].status == "fail" and EDGE in verdict.parts["edge_cases"].detail
    assert verdict.parts["fresh_cases"].status == "fail" and "not run" in verdict.parts["fresh_cases"].detail
    fault = _named(verdict, kind, EDGE)
    assert fault.source == "run" and results[EDGE].failure.message[:100] in fault.evidence
    return results[EDGE].failure


@pytest.mark.parametrize(
    "crash, expected",
    [
        ("os._exit(139)", "exited with code 139"),
        ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
    ],
    ids=["exit139", "segfault"],
)
def test_crash_is_charged_to_its_case_and_the_rest_is_not_run(judge, tmp_path, crash, expected):
    candidate = _candidate(tmp_path, "crash", CRASH_ON_EDGE.format(crash=crash))
    failure = _fault_on_edge(judge(candidate), "crash")
    assert expected in failure.message


def test_hang_is_a_timeout_after_one_case_timeout(budget_contract, tmp_path):
    contract, gates_dir = budget_contract
    candidate = _candidate(
        tmp_path,
        "sleeps",
        """
        import time


        def run(inputs, outputs, params, trace=None):
            if tuple(inputs["x"].shape) == (1, 1):
                while True:
                    time.sleep(1)
            honest(inputs, outputs, trace)
    """,
    )
    verdict, _ = _judge(contract, candidate, gates_dir)
    failure = _fault_on_edge(verdict, "timeout")
    assert "no progress for 20s" in failure.message and "case_timeout_s" in failure.message


def test_a_candidate_hanging_on_every_case_costs_one_case_timeout(budget_contract, tmp_path):
    contract, gates_dir = budget_contract
    candidate = _candidate(
        tmp_path,
        "sleeps_always",
        """
        import time


        def run(inputs, outputs, params, trace=None):
            time.sleep(3600)
    """,
        prelude=False,
    )
    verdict, _ = _judge(contract, candidate, gates_dir)
    fault = verdict.fault
    assert fault is not None and fault.kind == "timeout" and fault.variant == VARIANTS[0]
    assert len(fault.not_run) == len(verdict.variants) - 1
    assert "case_timeout_s" in _named(verdict, "timeout", VARIANTS[0]).evidence
    # One 20 s case timeout (from the process's start), not one per variant (15 x 20 s before).
    assert verdict.seconds < 2.5 * 20, verdict.seconds


def test_the_check_deadline_ends_a_slow_candidate(tmp_path):
    """Each variant makes progress (no case timeout), but the whole check has the contract's deadline. The deadline
    leaves room for the first variant under CI's load (its process start alone took 1.8 s idle and far more beside
    another worker: at 20 s the first variant once had not finished, 2026-12-01)."""
    from ferret.gate.build import build_gate

    contract = write_contract(
        tmp_path, lambda d: d["budgets"].update(case_timeout_s=15, check_timeout_s=35), name="rmsnorm_slow.yaml", link_tasks=True
    )
    build_gate(contract, gates_dir=tmp_path / "gates", profile="cpu")
    candidate = _candidate(
        tmp_path,
        "slow",
        """
        import time


        def run(inputs, outputs, params, trace=None):
            time.sleep(1.0)  # five calls a variant: about 5 s each, 13 variants and 2 fresh ones: over 60 s, past 35
            honest(inputs, outputs, trace)
    """,
    )
    verdict, _ = _judge(contract, candidate, tmp_path / "gates")
    fault = verdict.fault
    assert fault is not None and fault.kind == "timeout"
    assert "check_timeout_s" in fault.message and "deadline" in fault.message
    assert fault.not_run, "variants after the deadline are reported as not run"
    assert verdict.variants[0].passed, "what ran before the deadline is kept"
    assert "check_timeout_s" in _named(verdict, "timeout", fault.variant).evidence
    assert verdict.seconds < 35 + 15, verdict.seconds


def test_memory_hog_is_out_of_memory(budget_contract, tmp_path):
    contract, gates_dir = budget_contract
    candidate = _candidate(
        tmp_path,
        "hog",
        """
        import time

        _HOARD = []


        def run(inputs, outputs, params, trace=None):
            if tuple(inputs["x"].shape) == (1, 1):
                chunk = 100 << 20
                for _ in range(60):  # at most 6 GB, far over the 1500 MB budget
                    block = bytearray(chunk)
                    block[::4096] = b"\\x01" * (chunk // 4096)  # touch every page: real resident memory
                    _HOARD.append(block)
                time.sleep(3600)  # never reached while the watchdog works: it would read as a timeout
            honest(inputs, outputs, trace)
    """,
    )
    verdict, _ = _judge(contract, candidate, gates_dir)
    failure = _fault_on_edge(verdict, "out_of_memory")
    assert "1500 MB" in failure.message


# --- candidates that run but compute the wrong thing ---------------------------------------------------


def test_unwritten_output_shows_as_nan(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "unwritten",
        """
        def run(inputs, outputs, params, trace=None):
            pass
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    assert verdict.first_failing_stage == "y"
    for result in verdict.variants:
        assert result.failure is None and result.first_failing_stage == "y"
        inv_rms, y = result.stages
        assert not inv_rms.exposed
        assert y.nonfinite_mismatches > 0
        assert any("NaN/Inf" in reason for reason in y.reasons)
    # Named from the NaN left in y (the outputs), beside the run's own evidence of the pre-fills left in place.
    _named(verdict, "unwritten_output", VARIANTS[0])
    from_outputs = [d for d in verdict.detections if d.cheat == "unwritten_output" and d.source == "outputs"]
    assert from_outputs and from_outputs[0].evidence.startswith("y: "), from_outputs


def test_zeros_fail(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "zeros",
        """
        def run(inputs, outputs, params, trace=None):
            outputs["y"].zero_()
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed and verdict.first_failing_stage == "y"
    typical = _by_id(verdict)["typical@float32"].stages[1]
    assert not typical.passed
    assert typical.rel_l2 == pytest.approx(1.0)
    assert any(reason.startswith("rel_l2") for reason in typical.reasons)
    for part in ("correctness", "dtypes", "edge_cases"):
        assert verdict.parts[part].status == "fail"
    # Zeros are deterministic: that part is not what catches them.
    assert verdict.parts["determinism"].status == "pass"
    assert _named(verdict, "constant_output", "typical@bfloat16").evidence == "y: every entry is 0.0 while the reference varies"


def test_half_the_rows_fail_at_y_located_in_the_lower_half(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "half_rows",
        """
        def run(inputs, outputs, params, trace=None):
            y, inv_rms = rmsnorm(inputs, params)
            half = y.shape[0] // 2
            outputs["y"].zero_()
            outputs["y"][:half].copy_(y[:half])
            if trace is not None:
                trace["inv_rms"] = inv_rms
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    assert verdict.first_failing_stage == "y"
    result = _by_id(verdict)["typical@float32"]  # M = 16
    inv_rms, y = result.stages
    assert inv_rms.exposed and inv_rms.passed
    assert not y.passed
    assert set(y.worst.named) == {"row", "col"}
    assert y.worst.named["row"] >= 8
    assert summary(verdict).as_json()["cases"]["typical@float32"]["stages"]["y"]["worst"] == y.worst.named
    # Named at its first failing stage, with its numbers and the tolerance it missed.
    mismatch = _named(verdict, "math_mismatch", "typical@float32").evidence
    assert mismatch.startswith("stage y differs from the contract's math: rel_l2 "), mismatch
    assert "tolerance {" in mismatch and "'rel_l2'" in mismatch and "worst at {" in mismatch, mismatch


def test_nondeterministic_candidate_fails_determinism(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "noisy",
        """
        import os

        _GEN = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)


        def run(inputs, outputs, params, trace=None):
            y, inv_rms = rmsnorm(inputs, params)
            eps = torch.finfo(outputs["y"].dtype).eps
            # A fraction of a rounding unit of noise: accurate, but not bitwise reproducible.
            noise = (torch.randn(y.shape, generator=_GEN, dtype=torch.float64) * 0.1 * eps).clamp(-0.3 * eps, 0.3 * eps)
            outputs["y"].copy_(y.double() * (1 + noise))
            if trace is not None:
                trace["inv_rms"] = inv_rms
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    assert verdict.parts["determinism"].status == "fail"
    assert "repeated fast runs differ bitwise" in verdict.parts["determinism"].detail
    # Accurate on every case: only determinism catches it.
    for part in ("correctness", "dtypes", "edge_cases"):
        assert verdict.parts[part].status == "pass", (part, verdict.parts[part].detail)
    assert verdict.first_failing_stage is None
    assert not _by_id(verdict)["typical@float32"].repeats_bitwise_equal
    # A fresh case's two fast calls (its traced call the third run compared) still tell noise from a kernel, where
    # the noise outlives the output's rounding (not on a row of a few entries).
    fresh = [v for v in verdict.variants if v.part == "fresh_cases" and v.failure is None]
    assert fresh and 2 * sum(not v.repeats_bitwise_equal for v in fresh) >= len(fresh)
    # Which calls differed, and where.
    differ = _named(verdict, "warmup_detection", "typical@float32").evidence
    assert "y: call 2 against call 1: " in differ and "entries differ, first at [" in differ, differ


def test_traced_run_differing_from_fast_run_fails(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "traced_differs",
        """
        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            if trace is not None:
                outputs["y"].view(-1)[0] += 1.0
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    assert verdict.parts["determinism"].status == "fail"
    assert "traced run's final outputs differ bitwise" in verdict.parts["determinism"].detail
    assert "repeated fast runs differ" not in verdict.parts["determinism"].detail
    for result in verdict.variants:
        assert result.traced_equals_fast is False and result.repeats_bitwise_equal is True
        assert result.first_failing_stage is None
    traced = _named(verdict, "traced_differs", VARIANTS[0]).evidence
    assert "y: 1 of " in traced and "entries differ, first at [0, 0]" in traced, traced
    for part in ("correctness", "dtypes", "edge_cases"):
        assert verdict.parts[part].status == "pass"


def test_input_mutation_is_caught(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "mutates",
        """
        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            inputs["weight"].mul_(2)  # after the output is written: the output itself is right
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    for result in verdict.variants:
        assert result.failure.kind == "input_mutated"
        assert "weight" in result.failure.message
    assert _named(verdict, "input_mutation", VARIANTS[0]).catalogue == [3]


def test_tensor_subclass_in_trace_is_bad_output(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "subclass",
        """
        class Sneaky(torch.Tensor):
            pass


        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            if trace is not None:
                trace["inv_rms"] = trace["inv_rms"].as_subclass(Sneaky)
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    for result in verdict.variants:
        assert result.failure.kind == "bad_output"
        assert "Sneaky" in result.failure.message and "inv_rms" in result.failure.message
    assert _named(verdict, "lazy_result").catalogue == [14]


def test_non_tensor_in_trace_is_bad_output(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "trace_list",
        """
        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            if trace is not None:
                trace["inv_rms"] = trace["inv_rms"].tolist()
    """,
    )
    verdict = judge(candidate)
    assert all(r.failure and r.failure.kind == "bad_output" for r in verdict.variants)


def test_a_traced_stage_of_the_wrong_shape_is_named_a_wrong_shape(judge, tmp_path):
    candidate = _candidate(
        tmp_path,
        "trace_shape",
        """
        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            if trace is not None:
                trace["inv_rms"] = trace["inv_rms"][:1]
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed and verdict.first_failing_stage == "inv_rms"
    wrong = _named(verdict, "wrong_shape")
    assert wrong.evidence.startswith("stage inv_rms: shape [1] != expected ["), wrong.evidence
    assert "math_mismatch" not in {d.cheat for d in verdict.detections}


def test_a_finite_answer_where_the_reference_is_nan_is_a_named_math_mismatch(judge, tmp_path):
    """Right on every finite case; on the inf/NaN edge case it writes zeros in the rows where the reference has
    NaN (with a fill, which the ATen watch allows). No NaN poison is left (that would be unwritten_output): the
    first failing stage is named with its count of NaN/Inf mismatches."""
    candidate = _candidate(
        tmp_path,
        "nan_rows_zeroed",
        """
        import math


        def run(inputs, outputs, params, trace=None):
            honest(inputs, outputs, trace)
            x = inputs["x"]
            if tuple(x.shape) == (4, 257) and math.isinf(x[1, 7].item()):
                outputs["y"][1:3].fill_(0.0)
    """,
    )
    verdict = judge(candidate)
    assert not verdict.passed
    assert [r.id for r in verdict.variants if not r.passed] == ["inf_and_nan@bfloat16"]
    mismatch = _named(verdict, "math_mismatch", "inf_and_nan@bfloat16").evidence
    assert "NaN/Inf mismatches" in mismatch, mismatch


# --- isolation ---------------------------------------------------------------------------------------


def test_candidate_sees_no_keys_and_no_gate(judge, rmsnorm_gate, rmsnorm_gates_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-ferret-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ferret-test")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-ferret-test")
    monkeypatch.setenv("FERRET_TEST_SECRET", "hush")
    candidate = _candidate(
        tmp_path,
        "probe",
        f"""
        import os
        from pathlib import Path

        GATES = Path({str(rmsnorm_gates_dir.resolve())!r})
        GATE_NAME = {rmsnorm_gate.name!r}
        REAL_HOME = {str(Path.home())!r}


        def _check():
            leaked = [k for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "FERRET_TEST_SECRET") if k in os.environ]
            if leaked:
                raise RuntimeError(f"environment leaks {{leaked}}")
            cwd = Path.cwd().resolve()
            home = Path(os.environ["HOME"]).resolve()
            if str(home) == REAL_HOME:
                raise RuntimeError("HOME is the user's home")
            for place in (cwd, home):
                if place == GATES or GATES in place.parents or place in GATES.parents:
                    raise RuntimeError(f"{{place}} is related to the gates folder")
            # Its working folder, read through; under the allow-list sandbox HOME is the sandbox's own, and a
            # listing of it is refused like that of any folder beside the process's own.
            for place in (cwd,):
                for folder, dirs, files in os.walk(place):
                    for name in dirs + files:
                        if "golden" in name or name == "manifest.json" or name == GATE_NAME:
                            raise RuntimeError(f"{{folder}}/{{name}} is reachable from {{place}}")
                        path = Path(folder) / name
                        if path.is_file() and path.suffix == ".json" and GATE_NAME in path.read_text(errors="replace"):
                            raise RuntimeError(f"{{path}} names the gate")


        def run(inputs, outputs, params, trace=None):
            _check()
            honest(inputs, outputs, trace)
    """,
    )
    verdict = judge(candidate)
    # Every run of the probe succeeded: nothing leaked. (Its use of os and the file system is still
    # rejected by the static scan, as any candidate's would be: the integrity part fails for that alone.)
    assert all(r.passed for r in verdict.variants), summary(verdict)
    assert {d.source for d in verdict.detections} == {"static"}
    assert "reading_expected" in {d.cheat for d in verdict.detections}


def test_the_same_candidate_fails_when_a_key_would_be_visible(tmp_path, monkeypatch):
    """The probe above is able to fail: the check it relies on works in a plain process."""
    import subprocess

    probe = _candidate(
        tmp_path,
        "key_probe",
        """
        import os
        if "ANTHROPIC_API_KEY" in os.environ:
            raise SystemExit(7)
    """,
        prelude=False,
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-ferret-test")
    assert subprocess.run([sys.executable, str(probe)]).returncode == 7

    from ferret.sandbox.launch import candidate_environment, folder_view

    env = candidate_environment(tmp_path, interpret=True)
    assert "ANTHROPIC_API_KEY" not in env
    # HOME is the process's own: its folder, or /home/user (the sandbox's tmpfs) where the folder is shown there.
    assert env["HOME"] == folder_view(tmp_path).home != str(Path.home())
    assert env["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in candidate_environment(tmp_path, interpret=False)


# --- the report ----------------------------------------------------------------------------------------


def test_every_verdict_is_appended_to_the_report(rmsnorm_gate, tmp_path):
    gates_dir = tmp_path / "gates"
    gate = copy_gate(rmsnorm_gate, gates_dir)
    assert read_report(gate).verdicts == []
    unwritten = _candidate(
        tmp_path,
        "unwritten",
        """
        def run(inputs, outputs, params, trace=None):
            pass
    """,
    )
    raises = _candidate(
        tmp_path,
        "raises",
        """
        def run(inputs, outputs, params, trace=None):
            raise ValueError("nope")
    """,
    )
    candidates = (TRITON_RMSNORM, unwritten, raises)
    verdicts = []
    for candidate in candidates:
        verdict, used = _judge(RMSNORM_CONTRACT, candidate, gates_dir)
        assert used == gate
        verdicts.append(verdict)
        # Read back after every append: a verdict holding NaN (the unwritten output) must not break the report.
        assert len(read_report(gate).verdicts) == len(verdicts)

    report = read_report(gate)
    assert report.gate_hash == gate.name and report.verdict_count == 3
    assert [v.passed for v in report.verdicts] == [True, False, False]
    assert [v.index for v in report.verdicts] == [0, 1, 2]
    stored_verdicts = read_verdicts(gate)  # each whole, in its own file beside the index
    for stored, verdict, path in zip(stored_verdicts, verdicts, candidates, strict=True):
        assert stored.candidate_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert stored.candidate_path == str(path)
        assert stored.gate_hash == gate.name
        assert stored.model_dump_json() == verdict.model_dump_json()
    # The NaN the unwritten output holds survives the round trip.
    worst = stored_verdicts[1].variants[0].stages[1].worst
    assert worst is not None and worst.candidate != worst.candidate
    manifest = GateManifest.model_validate(verify_gate(gate))  # the report is outside the lock
    seeds = {r.id: r.seed for r in manifest.variants}
    # Every verdict records the frozen seeds, and the private seeds of the fresh cases drawn for it.
    assert all({k: v for k, v in verdict.seeds.items() if not k.startswith("fresh")} == seeds for verdict in stored_verdicts)
    assert all(
        len([k for k in verdict.seeds if k.startswith("fresh")]) == [r.part for r in verdict.variants].count("fresh_cases") >= 3
        for verdict in stored_verdicts
    )
    assert seeds["typical@float32"] == 1 and seeds["many_rows_narrow@bfloat16"] == 7


def test_progress_goes_to_the_ferret_logger_by_default(rmsnorm_gate, rmsnorm_gates_dir, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="ferret"):
        check(RMSNORM_CONTRACT, TRITON_RMSNORM, gates_dir=rmsnorm_gates_dir, profile="cpu")
    messages = [r.getMessage() for r in caplog.records if r.name == "ferret"]
    assert any(m.startswith(f"gate {rmsnorm_gate.name[:16]}") and "verified" in m for m in messages), messages
    assert "  typical@bfloat16: ok" in messages
    # the check ends saying what became of speed, not only PASS
    assert "speed not measured: no GPU: speed is not measured (an interpreter time is never a speedup)" in messages


# --- the judge's own resources ---------------------------------------------------------------------------------


def test_the_judge_gives_back_its_cached_gpu_memory_after_every_check_even_one_that_raises(
    rmsnorm_gates_dir, tmp_path, monkeypatch
):
    """After a round of MLA checks the dispatcher's process held 50.7 GiB of an H100 in torch's cache and its final
    check, another process, ran out of memory: every check gives the cache back, however it ends."""
    import ferret.gate.judge as judge_module

    given_back = []
    monkeypatch.setattr(judge_module, "return_cached_gpu_memory", lambda: given_back.append("check"))
    with pytest.raises(FileNotFoundError, match="no such candidate file"):
        check(RMSNORM_CONTRACT, tmp_path / "missing.py", gates_dir=rmsnorm_gates_dir, profile="cpu")
    assert given_back == ["check"]
    verdict, _ = check(
        RMSNORM_CONTRACT, _candidate(tmp_path, "syntax", "def run(:\n", prelude=False), gates_dir=rmsnorm_gates_dir, profile="cpu"
    )
    assert not verdict.passed and given_back == ["check", "check"]


def test_returning_the_cached_gpu_memory_empties_torchs_cache_only_where_cuda_was_started(monkeypatch):
    import torch

    from ferret.gate.judge import return_cached_gpu_memory

    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return_cached_gpu_memory()
    assert emptied == []  # never starts CUDA in a process that has not (a CPU check, the CI)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    return_cached_gpu_memory()
    assert emptied == [True]


def test_a_case_judged_on_its_outputs_alone_runs_without_a_traced_call(tmp_path):
    """`traced: false` spares a case its traced run (the candidate is never handed a trace for it); the output is
    judged as everywhere, and every other case still runs traced."""
    path = write_contract(
        tmp_path,
        lambda d: d["cases"]["cpu"][0].update(traced=False),
        name="rmsnorm_untraced.yaml",
        link_tasks=True,
    )
    verdict, _ = _judge(path, TRITON_RMSNORM, tmp_path / "gates")
    assert verdict.passed, summary(verdict)
    untraced = [r for r in verdict.variants if r.case == "typical"]
    assert untraced and all("traced" not in r.phase_seconds for r in untraced)
    assert all(not s.exposed for r in untraced for s in r.stages if s.stage == "inv_rms")
    others = [r for r in verdict.variants if r.case != "typical"]
    assert others and all("traced" in r.phase_seconds for r in others)
