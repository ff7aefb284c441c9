"""Input fingerprinting and output replay (docs/cheats.md 22).

A candidate that keys its answers on the content of its inputs (a sampled fingerprint, a hash of every bit) and
replays them with a real copy kernel passes every correctness run: it is honest on first sight, and the no-op launch
check sees its copy work. It gains where inputs repeat: the timed loop. There, no timed call presents content an
earlier one did (a few elements of each set trade places before it, and are put back after), and a random sample of
the timed calls is checked by the judge on the changed content (`ferret.bench.process.AnswerSample`,
`ferret.gate.answers.check_sampled_answers`). Rehearsed here on the CPU with the real timing processes; on a GPU the
same code runs between the events (`tests/gpu/`). Where nothing is timed (the CPU profile), the runner makes one more
fast call per variant on inputs with a few elements moved, at a place among the repeats drawn at random, and the judge
checks it the same way (`ferret.gate.answers.check_moved_call`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import xxhash
from safetensors.torch import save_file

from ferret import wire
from ferret.bench.process import AnswerSample, Slots
from ferret.contract.task import Task
from ferret.gate.answers import _changed_set, check_moved_call, reference_outputs
from ferret.gate.context import GateContext
from ferret.gate.judge import check, locate_gate
from ferret.gate.lock import verify_gate
from ferret.gate.models import GateManifest
from ferret.gate.timing import TimingOptions, time_candidate
from ferret.sandbox import buffers, runner

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"
CANDIDATES = Path(__file__).resolve().parent / "candidates"
REPLAYS = ["u6_fingerprint_replay", "u6_sum_replay"]


def _digest(inputs: dict[str, torch.Tensor]) -> str:
    return xxhash.xxh3_128_hexdigest(b"".join(inputs[n].contiguous().view(torch.uint8).numpy().tobytes() for n in sorted(inputs)))


def test_every_timed_call_sees_content_no_call_saw_and_the_sets_are_put_back():
    generator = torch.Generator().manual_seed(0)
    pool = [{"x": torch.randn(16, 512, generator=generator), "weight": torch.randn(512, generator=generator)} for _ in range(2)]
    originals = [{n: t.clone() for n, t in inputs.items()} for inputs in pool]
    seen: list[str] = []

    def fn(inputs, outputs, params):
        seen.append(_digest(inputs))
        outputs["y"].copy_(inputs["x"] * 2)

    slots = Slots(fn, pool, lambda: {"y": torch.full((16, 512), float("nan"))}, {})
    sample = AnswerSample(slots, ["x", "weight"])
    for _ in range(40):
        sample.before()
        slots.call()
        sample.after()
    assert len(set(seen)) == 40, "a timed call saw content an earlier one saw"
    assert all(torch.equal(pool[i][n], originals[i][n]) for i in range(2) for n in ("x", "weight")), "a set not put back"
    assert len(sample.kept) == wire.SAMPLED_ANSWERS
    for kept in sample.kept:  # the record says how the judge rebuilds the content the call saw
        changed, why = _changed_set(
            originals,
            kept.set_index,
            {wire.CHANGED_AT + n: at for n, (at, _) in kept.changed.items()}
            | {wire.CHANGED_TO + n: to for n, (_, to) in kept.changed.items()},
            ["x", "weight"],
        )
        assert changed is not None, why
        assert torch.equal(kept.answer["y"], changed["x"] * 2)
        assert _digest(changed) in seen


def test_the_judge_refuses_a_sample_record_that_is_not_a_move():
    original = [{"x": torch.arange(4096, dtype=torch.float32).reshape(8, 512)}]
    at = torch.tensor([1, 5, 9, 13], dtype=torch.int64)
    honest = {wire.CHANGED_AT + "x": at, wire.CHANGED_TO + "x": original[0]["x"].reshape(-1)[at].roll(1)}
    assert _changed_set(original, 0, honest, ["x"])[0] is not None
    invented = {wire.CHANGED_AT + "x": at, wire.CHANGED_TO + "x": torch.zeros(4)}
    assert _changed_set(original, 0, invented, ["x"])[0] is None
    nothing = {wire.CHANGED_AT + "x": at[:0], wire.CHANGED_TO + "x": torch.zeros(0)}
    assert _changed_set(original, 0, nothing, ["x"])[0] is None
    assert _changed_set(original, 3, honest, ["x"])[0] is None


@pytest.fixture(scope="module")
def rehearse(tmp_path_factory):
    task = Task.load(CONTRACT)
    gate = locate_gate(CONTRACT, task.contract, tmp_path_factory.mktemp("gates"), "cpu", lambda m: None)
    context = GateContext(task, GateManifest.model_validate(verify_gate(gate)), gate)
    return lambda path: time_candidate(context, path, TimingOptions(lambda m: None, device="cpu"))


@pytest.mark.parametrize("name", REPLAYS)
def test_a_candidate_that_replays_answers_keyed_on_content_is_named(name, rehearse):
    result = rehearse(CANDIDATES / f"{name}.py")
    cheats = {d.cheat for d in result.detections}
    assert "content_replay" in cheats, [c.flags for c in result.cases]
    assert all(22 in d.catalogue for d in result.detections if d.cheat == "content_replay")


def test_the_honest_candidate_passes_every_sampled_timed_answer(rehearse):
    result = rehearse(HONEST)
    case = result.cases[0]
    assert case.flags == [] and result.detections == []
    assert case.answers_checked >= case.pool_sets + 1 + min(wire.SAMPLED_ANSWERS, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("name", REPLAYS)
def test_on_the_gpu_a_candidate_that_replays_answers_keyed_on_content_is_rejected(name, tmp_path):
    """The same candidates through `--profile gpu`. A content key needs the inputs read whole: on the GPU the key's
    read back to the host is named first (`host_numerics`); the timed calls' check is the layer behind it, proven on
    the GPU without that read by `test_on_the_gpu_unmeasured_a_replay_is_named_by_the_moved_call`."""
    small = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_small.yaml"
    verdict, _ = check(small, CANDIDATES / f"{name}.py", tmp_path, profile="gpu")
    cheats = {d.cheat for d in verdict.detections}
    assert not verdict.passed and cheats & {"content_replay", "host_numerics"}, (cheats, verdict.timing)


@pytest.mark.gpu
def test_on_the_gpu_an_honest_candidate_passes_its_sampled_timed_answers(tmp_path):
    small = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_small.yaml"
    verdict, _ = check(small, HONEST, tmp_path, profile="gpu")
    assert verdict.passed and not verdict.timing.detections, verdict.timing


# --- where nothing is timed: the runner's call on moved inputs ------------------------------------------------------


def test_a_moved_copy_moves_a_few_elements_as_its_record_says():
    original = torch.randn(64, 96, generator=torch.Generator().manual_seed(1))
    moved, at, to = buffers.moved_elements(original)
    assert at.numel() == wire.changed_count(original.numel()) == at.unique().numel()
    assert not torch.equal(moved, original), "the copy presents the same content"
    assert torch.equal(moved.reshape(-1).sort().values, original.reshape(-1).sort().values)  # only places traded
    assert (moved != original).sum() == at.numel()
    record = {wire.CHANGED_AT + "x": at, wire.CHANGED_TO + "x": to}
    rebuilt, why = _changed_set([{"x": original}], 0, record, ["x"])
    assert rebuilt is not None and torch.equal(rebuilt["x"], moved), why


def test_a_moved_float8_input_is_rebuilt_and_a_forged_one_refused():
    """Quantized storage read in place (`ferret new --quantized`'s codes) is moved as any floating input is; float8
    has no sort or equal on the CPU, and the judge's check of the record must still hold."""
    original = torch.randn(8, 256, generator=torch.Generator().manual_seed(2)).to(torch.float8_e4m3fn)
    moved, at, to = buffers.moved_elements(original)
    record = {wire.CHANGED_AT + "up": at, wire.CHANGED_TO + "up": to}
    rebuilt, why = _changed_set([{"up": original}], 0, record, ["up"])
    assert rebuilt is not None and torch.equal(rebuilt["up"].view(torch.uint8), moved.view(torch.uint8)), why
    forged = {**record, wire.CHANGED_TO + "up": (to.to(torch.float32) * 2).to(torch.float8_e4m3fn)}
    refused, why = _changed_set([{"up": original}], 0, forged, ["up"])
    assert refused is None and "not the ones that were there" in why


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_move_of_a_nan_is_a_move(dtype):
    """An edge case's input holds NaN and inf; where the moved positions take the NaN, the record is still a move of
    the set's own values (NaN equals nothing as a number: an honest kernel was named content_replay for it)."""
    original = torch.randn(4, 3, 64, generator=torch.Generator().manual_seed(3)).to(dtype)
    original[0, 0, 0], original[1, 2, 5] = float("nan"), float("inf")
    flat = original.reshape(-1)
    at = torch.tensor([0, 1 * 192 + 2 * 64 + 5], dtype=torch.int64)
    record = {wire.CHANGED_AT + "x": at, wire.CHANGED_TO + "x": flat[at].flip(0).clone()}
    rebuilt, why = _changed_set([{"x": original}], 0, record, ["x"])
    assert rebuilt is not None, why
    assert torch.isinf(rebuilt["x"][0, 0, 0]) and torch.isnan(rebuilt["x"][1, 2, 5])
    forged = {**record, wire.CHANGED_TO + "x": torch.tensor([float("inf"), 1.0], dtype=dtype)}
    refused, why = _changed_set([{"x": original}], 0, forged, ["x"])
    assert refused is None and "not the ones that were there" in why


def test_the_moved_call_takes_a_random_place_after_the_first_call():
    places = set()
    for _ in range(80):
        order = runner._schedule(3, True)
        assert [r for r in order if r != runner._MOVED] == [0, 1, 2] and order[0] == 0
        places.add(order.index(runner._MOVED))
    assert places == {1, 2, 3}, "a candidate counting its calls could tell the moved one"
    assert runner._MOVED not in runner._schedule(3, False)


def _moved_got(task: Task, inputs: dict[str, torch.Tensor], answer_of) -> dict[str, torch.Tensor]:
    """A variant's tensors holding a call on `inputs` with `x` moved, whose answer is `answer_of(moved inputs)`."""
    moved_x, at, to = buffers.moved_elements(inputs["x"])
    moved = dict(inputs) | {"x": moved_x}
    got = {wire.moved_key(wire.CHANGED_AT + "x"): at, wire.moved_key(wire.CHANGED_TO + "x"): to}
    if wire.changed_count(inputs["weight"].numel()):
        moved_w, at_w, to_w = buffers.moved_elements(inputs["weight"])
        moved["weight"] = moved_w
        got |= {wire.moved_key(wire.CHANGED_AT + "weight"): at_w, wire.moved_key(wire.CHANGED_TO + "weight"): to_w}
    return got | {wire.moved_key(n): t for n, t in answer_of(moved).items()}


def test_the_judge_names_a_moved_call_answered_with_the_unmoved_inputs_answer():
    task = Task.load(CONTRACT)
    generator = torch.Generator().manual_seed(2)
    inputs = {"x": torch.randn(16, 256, generator=generator), "weight": torch.randn(256, generator=generator)}
    outputs = {o.name for o in task.contract.outputs}

    def honest(moved):
        return {n: t.float() for n, t in reference_outputs(task, moved, outputs, "cpu").items()}

    def replayed(moved):
        return {n: t.float() for n, t in reference_outputs(task, inputs, outputs, "cpu").items()}

    checked, flags = check_moved_call(task, inputs, _moved_got(task, inputs, honest), "float32", ["x", "weight"], "cpu")
    assert checked == len(outputs) and flags == []
    _, flags = check_moved_call(task, inputs, _moved_got(task, inputs, replayed), "float32", ["x", "weight"], "cpu")
    assert flags and all(f.startswith("content_replay: ") and "replayed" in f for f in flags), flags
    _, flags = check_moved_call(task, inputs, {wire.fast_key(0, "y"): inputs["x"]}, "float32", ["x", "weight"], "cpu")
    assert flags == ["content_replay: the call on moved inputs left no answer"]
    forged = _moved_got(task, inputs, honest)
    forged[wire.moved_key(wire.CHANGED_TO + "x")] = torch.zeros_like(forged[wire.moved_key(wire.CHANGED_TO + "x")])
    _, flags = check_moved_call(task, inputs, forged, "float32", ["x", "weight"], "cpu")
    assert flags and "not the ones that were there" in flags[0], flags


@pytest.fixture(scope="module")
def cpu_gates(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-gates")


@pytest.mark.parametrize("name", REPLAYS)
def test_on_the_cpu_profile_a_candidate_that_replays_answers_keyed_on_content_is_rejected(name, cpu_gates):
    """Nothing is timed on the CPU: the call on moved inputs names the replay, as a run-time finding."""
    verdict, _ = check(CONTRACT, CANDIDATES / f"{name}.py", cpu_gates, profile="cpu")
    replays = [d for d in verdict.detections if d.cheat == "content_replay"]
    assert not verdict.passed and replays, [(d.cheat, d.evidence[:120]) for d in verdict.detections]
    assert all(d.source == "runtime" and 22 in d.catalogue and "moved" in d.evidence for d in replays)
    assert verdict.parts["integrity"].status == "fail"


def test_on_the_cpu_profile_an_honest_candidate_passes_its_moved_calls(cpu_gates):
    verdict, _ = check(CONTRACT, HONEST, cpu_gates, profile="cpu")
    assert verdict.passed and verdict.detections == [], [(d.cheat, d.evidence[:200]) for d in verdict.detections]


def test_the_runner_saves_the_moved_call_and_its_record_beside_unmoved_repeats(tmp_path):
    generator = torch.Generator().manual_seed(3)
    original = {"x": torch.randn(8, 256, generator=generator), "weight": torch.randn(256, generator=generator)}
    save_file(original, str(tmp_path / "inputs.safetensors"))
    spec = {"y": ([8, 256], "float32")}
    variant = wire.VariantJob("v", str(tmp_path / "inputs.safetensors"), spec, [], ["x", "weight"], moved_call=True)
    job = wire.CandidateJob("c.py", "run", "cpu", {}, 3, 0, None, [variant], str(tmp_path))
    seen: list[str] = []

    def run(inputs, outputs, params, trace=None):
        seen.append(_digest(inputs))
        outputs["y"].copy_(inputs["x"] * inputs["weight"])

    saved, status = runner.run_variant(run, variant, job, "cpu")
    assert status.ok and len(seen) == 5 and len(set(seen)) == 2  # 3 repeats, traced, moved: one content differs
    assert all(torch.equal(saved[wire.fast_key(r, "y")], original["x"] * original["weight"]) for r in range(3))
    record = {k.split(".", 2)[2]: t for k, t in saved.items() if wire.parse_sample_key(k)}
    moved, why = _changed_set([original], 0, record, ["x", "weight"])
    assert moved is not None, why
    assert torch.equal(record["y"], moved["x"] * moved["weight"]) and _digest(moved) in seen
    assert "moved" in status.prefills and status.prefills["moved"] != buffers.NAN


@pytest.mark.gpu
@pytest.mark.parametrize("name", REPLAYS)
def test_on_the_gpu_unmeasured_a_replay_is_named_by_the_moved_call(name, tmp_path):
    """Speed not asked for: nothing is timed, so the call on moved inputs runs on the GPU too and names the replay."""
    small = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_small.yaml"
    verdict, _ = check(small, CANDIDATES / f"{name}.py", tmp_path, profile="gpu", measure_speed=False)
    replays = [d for d in verdict.detections if d.cheat == "content_replay" and d.source == "runtime"]
    assert not verdict.passed and replays, [(d.cheat, d.evidence[:120]) for d in verdict.detections]


def test_the_judge_draws_one_variant_of_each_part_for_the_moved_call(cpu_gates):
    """Each part (correctness, dtypes, edge cases, fresh cases) has one variant making the call, drawn anew per check."""
    from ferret.gate.fresh import draw_fresh_cases
    from ferret.gate.judge import Judge

    judge = Judge(Task.load(CONTRACT), cpu_gates, "cpu")
    fresh = draw_fresh_cases(judge.task, "cpu", "cpu")
    parts: dict[str, set[str]] = {}
    for record in judge.manifest.variants:
        parts.setdefault(record.part, set()).add(record.id)
    parts["fresh_cases"] = {f.id for f in fresh}
    draws = [judge._moved_variants(fresh) for _ in range(40)]
    for moved in draws:
        assert len(moved) == len(parts) and all(len(moved & ids) == 1 for ids in parts.values())
    widest = max(parts.values(), key=len)
    assert len({next(iter(moved & widest)) for moved in draws}) > 1, "the same variant every time: a candidate could learn it"
