"""The judge's check of the answers a candidate gave while timed (ferret/gate/answers.py), on the CPU:
the timing process itself needs a GPU, the check does not."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ferret.contract.load import load_contract
from ferret.contract.task import Task
from ferret.gate.answers import check_timed_answers
from ferret.gate.inputs import draw_inputs

REPO = Path(__file__).resolve().parents[2]
CONTRACT_PATH = REPO / "contracts" / "mla_attention.yaml"


@pytest.fixture(scope="module")
def case_files(tmp_path_factory):
    """The gate's inputs of one MLA CPU case, a re-randomized second set, and honest answers to both."""
    from tasks.mla_attention.reference import reference

    contract = load_contract(CONTRACT_PATH)
    case = contract.cases_for("cpu")[0]
    dtype = contract.primary_dtype
    gate_inputs = draw_inputs(contract, case, dtype)
    float_read_only = [i.name for i in contract.inputs if i.role == "in" and gate_inputs[i.name].is_floating_point()]
    generator = torch.Generator().manual_seed(5)
    second = {
        n: (gate_inputs[n].float() * (1 + 0.01 * torch.randn(gate_inputs[n].shape, generator=generator))).to(gate_inputs[n].dtype)
        for n in float_read_only
    }
    pool = [gate_inputs, {**gate_inputs, **second}]
    answers = {f"set{i}.{n}": one_set[n] for i, one_set in enumerate(pool) for n in float_read_only}
    for slot, set_index in enumerate([0, 1, 0]):
        copies = {n: t.clone() for n, t in pool[set_index].items()}
        answers[f"slot{slot}.set{set_index}.o_heads"] = (
            reference(copies, dict(contract.params))["o_heads"].to(torch.bfloat16).contiguous()
        )
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    return contract, pool, answers, read_only


def _check(case_files, answers, tmp_path):
    contract, pool, _, read_only = case_files
    path = tmp_path / "answers.safetensors"
    save_file(answers, str(path))
    return check_timed_answers(Task.load(CONTRACT_PATH), pool, path, contract.primary_dtype, read_only)


def test_honest_answers_on_every_input_set_pass(case_files, tmp_path):
    checked, flags = _check(case_files, case_files[2], tmp_path)
    assert (checked, flags) == (3, [])


def test_an_answer_from_the_wrong_input_set_is_named(case_files, tmp_path):
    """The second set's answer replaced by the first set's: right for the gate's inputs, wrong for the
    inputs that timed call was given (a replayed or cached answer)."""
    answers = dict(case_files[2])
    answers["slot1.set1.o_heads"] = answers["slot0.set0.o_heads"].clone()
    checked, flags = _check(case_files, answers, tmp_path)
    assert checked == 3 and len(flags) == 1
    assert flags[0].startswith(
        "warmup_detection: the answer a timed call left in output slot 1 (input set 1) fails stage o_heads"
    )


def test_a_cheap_answer_is_named(case_files, tmp_path):
    answers = dict(case_files[2])
    answers["slot2.set0.o_heads"] = torch.zeros_like(answers["slot2.set0.o_heads"])
    checked, flags = _check(case_files, answers, tmp_path)
    assert [f.split(" (")[0] for f in flags] == ["warmup_detection: the answer a timed call left in output slot 2"]


def test_missing_or_empty_answers_are_findings(case_files, tmp_path):
    contract, pool, answers, read_only = case_files
    checked, flags = check_timed_answers(Task.load(CONTRACT_PATH), pool, tmp_path / "none.safetensors", "bfloat16", read_only)
    assert checked == 0 and "missing or unreadable" in flags[0]
    only_inputs = {k: v for k, v in answers.items() if not k.startswith("slot")}
    checked, flags = _check(case_files, only_inputs, tmp_path)
    assert checked == 0 and "no timed answer" in flags[0]


def test_inputs_rewritten_to_a_set_already_answered_are_named(case_files, tmp_path):
    """A candidate that copies an input set it has answered over the set it is given (and copies the old
    answer back) leaves answers that match the inputs it left behind. The judge's own copy of the sets
    shows both the rewritten input and the wrong answer."""
    contract, pool, answers, _ = case_files
    answers = dict(answers)
    float_names = [k.split(".", 1)[1] for k in answers if k.startswith("set1.")]
    for name in float_names:
        answers[f"set1.{name}"] = pool[0][name].clone()
    answers["slot1.set1.o_heads"] = answers["slot0.set0.o_heads"].clone()
    checked, flags = _check(case_files, answers, tmp_path)
    assert sorted(f for f in flags if f.startswith("input_mutation:")) == sorted(
        f"input_mutation: after the timed calls, read-only input {name} of input set 1 is not what the judge gave"
        for name in float_names
    )
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot 1 (input set 1)") for f in flags)


def test_an_input_set_the_judge_never_made_is_named(case_files, tmp_path):
    answers = dict(case_files[2])
    answers["slot2.set7.o_heads"] = answers.pop("slot2.set0.o_heads")
    checked, flags = _check(case_files, answers, tmp_path)
    assert checked == 2 and flags == ["warmup_detection: output slot 2 claims an input set (7) the judge never made"]


def test_each_input_sets_reference_run_is_freed_before_the_next_set_is_run(case_files, tmp_path, monkeypatch):
    """Only the outputs of a set's reference run are kept: its other stages (on the MLA gate a float64 cache among
    them, 4.8 GB a set at 16 heads, B=64, L=16384) and the judge's copy of the inputs are gone before the next set's
    run starts, so the check holds one set's run at a time."""
    import gc
    import weakref

    from tasks.mla_attention.reference import reference

    held: list[weakref.ref] = []
    live_at_each_run: list[int] = []

    def watched(inputs, params):
        gc.collect()
        live_at_each_run.append(sum(ref() is not None for ref in held))
        computed = reference(inputs, params)
        held.extend(weakref.ref(t) for name, t in (*inputs.items(), *computed.items()) if name != "o_heads")
        return computed

    monkeypatch.setattr(Task, "reference", property(lambda task: watched))
    contract, pool, answers, read_only = case_files
    path = tmp_path / "answers.safetensors"
    save_file(answers, str(path))
    checked, flags = check_timed_answers(Task.load(CONTRACT_PATH), pool, path, contract.primary_dtype, read_only)
    assert (checked, flags) == (3, []) and len(held) > 10
    assert live_at_each_run == [0, 0]
