"""On the GPU: serving-true timing (ferret/bench/graph.py, ferret/gate/serving.py). The honest candidates and the MLA
baselines are captured in a CUDA graph and replayed with correct answers on sets copied into the captured buffers; a
candidate whose host-side plan is frozen at capture (docs/cheats.md 32) is rejected by its replayed answers; one that
reads a device value on the host (`.item()`) cannot be captured and is `not_graph_capturable`: rejected where the
contract requires capture, compared eagerly and reported for review where it only warns. The CPU tests of the same
logic: tests/bench/test_graph_capture_cpu.py, tests/gate/test_serving.py, tests/adversarial/test_graph_frozen.py."""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "tests/gpu/contracts/rmsnorm_small.yaml"
# The frozen-plan candidate reads integer metadata (positions) on the host, which rope has and rmsnorm does not: a plan
# read from a float tensor, or from an integer one a kernel wrote, is host_numerics before any timing.
ROPE_SMALL = REPO / "tests/gpu/contracts/rope_small.yaml"
ROPE_REQUIRED = REPO / "tests/gpu/contracts/rope_small_graph_required.yaml"
HONEST = REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py"
FROZEN = REPO / "tests/adversarial/candidates/u10_graph_frozen.py"
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _item_copy(tmp_path: Path) -> Path:
    """u10 reading its highest position with `.item()` under capture too: the capture fails. Its capture query is taken
    out, a library call the static scan names on its own."""
    source = FROZEN.read_text()
    query = "return x.is_cuda and torch.cuda.is_current_stream_capturing()"
    assert query in source and "PLAN_WHEN_CAPTURED = True" in source
    path = tmp_path / "u10_item_under_capture.py"
    path.write_text(source.replace("PLAN_WHEN_CAPTURED = True", "PLAN_WHEN_CAPTURED = False").replace(query, "return False"))
    return path


def test_the_honest_rmsnorm_is_timed_replay_against_replay_with_every_replay_checked():
    from ferret.gate.judge import check

    verdict, _ = check(SMALL, HONEST, GATES, profile="gpu", progress=_progress)
    assert verdict.passed and verdict.timing.measured and not verdict.timing.detections, verdict.timing
    assert verdict.timing.serving_measured and verdict.timing.speed_basis == "graph_replay"
    case = verdict.timing.cases[0]
    serving = case.serving
    assert serving is not None and serving.basis == "graph_replay" and serving.not_graph_capturable == {}
    # per candidate timing process: the fresh draw, pool set 1 and pool set 0, one output each
    assert serving.replay_answers_checked == 3 * len(case.process_ms["candidate"])
    for name in ("candidate", "baseline"):
        assert serving.replay_ms[name] > 0 and serving.eager_ms[name] > 0
        assert 0.0 <= serving.host_share[name] < 1.0
    assert serving.speedup == pytest.approx(serving.replay_ms["baseline"] / serving.replay_ms["candidate"])
    assert verdict.timing.geomean_speedup == pytest.approx(serving.speedup)
    assert "candidate:serving" in case.process_seconds


def _replayed(contract_path: Path, module_path: Path, case_name: str, tmp_path: Path):
    """`module_path`'s `run` captured on a pool set of `case_name`, replayed on the sets the timing process replays,
    its answers checked by the judge's check; and its replay time."""
    import torch
    from safetensors.torch import save_file

    from ferret.bench import graph, guards
    from ferret.bench.process import load_module
    from ferret.contract.task import Task
    from ferret.gate.answers import check_replayed_answers
    from ferret.gate.inputs import draw_inputs, output_specs

    task = Task.load(contract_path)
    contract, dtype = task.contract, task.contract.primary_dtype
    case = next(c for c in contract.cases_for("gpu") if c.name == case_name)
    gate_inputs = draw_inputs(contract, case, dtype)
    floats = [i.name for i in contract.inputs if i.role == "in" and gate_inputs[i.name].is_floating_point()]
    pool = guards.input_pool(gate_inputs, floats, target_bytes=0)
    fresh = [draw_inputs(contract, case, dtype, seed=secrets.randbits(62))]
    on_gpu = [{n: t.cuda() for n, t in one.items()} for one in (*pool, *fresh)]
    outputs = {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in output_specs(contract, case, dtype).items()}
    run, params = (
        load_module(str(module_path), f"graph_test_{module_path.parent.name}_{module_path.stem}").run,
        dict(contract.params),
    )
    captured = graph.capture(lambda i, o: run(i, o, params), on_gpu[0], outputs)
    answers = graph.replay_answers(captured, graph.replay_plan(on_gpu[: len(pool)], on_gpu[len(pool) :]))
    path = tmp_path / f"{module_path.stem}.safetensors"
    save_file(answers, str(path))
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    replay_ms = graph.replay_ms(captured, on_gpu[: len(pool)], flush.zero_, lambda ms: None)
    return check_replayed_answers(task, pool, fresh, path, dtype), replay_ms


@pytest.mark.parametrize(
    ("op", "module"),
    [
        ("mla_attention", "tasks/mla_attention/candidates/triton_mla.py"),
        ("mla_attention", "tasks/mla_attention/baseline.py"),
        ("mla_attention_paged", "tasks/mla_attention_paged/candidates/triton_mla_paged.py"),
        ("mla_attention_paged", "tasks/mla_attention_paged/baseline.py"),
    ],
)
def test_the_honest_mla_candidates_and_the_baselines_capture_and_replay_with_correct_answers(op, module, tmp_path):
    (checked, flags), replay_ms = _replayed(REPO / f"contracts/{op}.yaml", REPO / module, "tp1_b64_l4096", tmp_path)
    assert flags == [] and checked == 3  # the fresh draw (its own lengths), pool sets 1 and 0
    assert replay_ms > 0


def test_a_plan_frozen_at_capture_is_rejected_by_its_replayed_answers(tmp_path):
    (checked, flags), _ = _replayed(ROPE_SMALL, FROZEN, "decode_q_64x128", tmp_path)
    assert checked == 3 and len(flags) == 3 and all(f.startswith("graph_frozen: ") for f in flags), flags

    # In a whole check its capture query is named first, by the static scan (a library call): the candidate is not
    # timed, so the replays above are what shows the runtime defence.
    from ferret.gate.judge import check

    verdict, _ = check(ROPE_SMALL, FROZEN, GATES, profile="gpu", progress=_progress)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    named = [d for d in verdict.detections if d.cheat == "library_call" and d.source == "static"]
    assert named and "is_current_stream_capturing" in named[0].evidence, verdict.detections


def test_a_call_that_reads_the_host_cannot_be_captured_and_the_contract_decides(tmp_path):
    from ferret.gate.judge import check

    item = _item_copy(tmp_path)
    verdict, _ = check(ROPE_REQUIRED, item, GATES, profile="gpu", progress=_progress)
    assert not verdict.passed
    named = [d for d in verdict.detections if d.cheat == "not_graph_capturable"]
    assert named and named[0].catalogue == [] and "host_read" in named[0].evidence and ".item()" in named[0].evidence

    verdict, _ = check(ROPE_SMALL, item, GATES, profile="gpu", progress=_progress)  # the contract only warns
    assert verdict.passed and not verdict.timing.detections, verdict.timing.detections
    assert any(line.split(": ", 1)[1].startswith("not_graph_capturable") for line in verdict.timing.review)
    case = verdict.timing.cases[0]
    serving = case.serving
    assert serving is not None and serving.basis == "eager" and "candidate" not in serving.replay_ms
    assert serving.not_graph_capturable["candidate"].startswith("host_read: ")
    # A synchronizing call's eager rounds can spread past the contract's limit: an unstable case sets no basis.
    assert verdict.timing.speed_basis == (None if case.unstable else "eager")
