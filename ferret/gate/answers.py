"""The judge's check of the answers given while timed.

The timing process runs the candidate's code, so nothing in it may know a right answer, and nothing it
sends back is trusted. The judge drew the pool of input sets and kept its own copy. The timing process
sends back every timed call's answer (as that call left it in its output buffer), naming the input set
it answered, and the read-only inputs of every set as the timed calls left them. Here, in the judge's
process:
- every read-only input must still be bitwise the judge's copy (a candidate that rewrites its inputs to
  ones it already answered is named `input_mutation`);
- the canonical reference is run on the judge's copy of each set, and every answer is compared with the
  contract's tolerance for its output stage. A candidate that is honest in the correctness runs and cuts
  work once timed (docs/cheats.md 17, and 16 when it replays) fails here even where the timing process's own
  fingerprint re-check agrees with it;
- a random sample of the timed calls was kept, each on its set with a few elements moved (content the candidate
  never saw, equal to a seen set almost everywhere): the reference is run on the judge's copy moved the same way,
  so a replay keyed on the content (docs/cheats.md 22) is the unchanged set's answer, and wrong.

Answers file layout (safetensors, keys from `ferret.wire`): `pool_key(i, input)` for the floating-point
read-only inputs of pool set `i` after timing, and `slot_key(j, i, output)` for the answer left in output
slot `j` by a timed call on set `i`; `graph_key(source, i, output)` for a CUDA-graph replay on a pool set or one of
the judge's fresh draws (`check_replayed_answers`). In-place inputs of every set start from the gate's state, as each
timed call on them rewrites the same entries.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ferret import wire
from ferret.bench.graph import replay_plan
from ferret.contract.task import Task
from ferret.gate.metrics import bitwise_equal, compare_to_golden


def check_timed_answers(
    task: Task, pool: list[dict[str, torch.Tensor]], answers_file: Path, dtype: str, read_only: list[str], sampled: int = 0
) -> tuple[int, list[str]]:
    """(answers checked, flags naming each wrong one) for the timed calls on `pool`, the judge's own copy of
    the input sets: each output slot's last answer, and the timed calls kept at random (at least `sampled` of them,
    `SAMPLED_AT_LEAST` from a timing process). A missing or unreadable answers file is itself a flag."""
    contract = task.contract
    try:
        answers = load_file(str(answers_file))
    except Exception as err:  # noqa: BLE001 - the file is written in the candidate's process: any damage is a finding
        return 0, [f"warmup_detection: the timing process's answers are missing or unreadable ({type(err).__name__})"]
    flags = []
    slots: list[tuple[int, int, str, torch.Tensor]] = []
    samples: dict[int, tuple[int, dict[str, torch.Tensor]]] = {}
    for key, tensor in answers.items():
        if slot := wire.parse_slot_key(key):
            slots.append((*slot, tensor))
        elif sample := wire.parse_sample_key(key):
            number, set_index, name = sample
            samples.setdefault(number, (set_index, {}))[1][name] = tensor
        elif pooled := wire.parse_pool_key(key):
            index, name = pooled
            if index >= len(pool) or name not in read_only:
                flags.append(f"warmup_detection: answers name an input set or input the judge never made: {key}")
            elif not bitwise_equal(tensor, pool[index][name]):
                flags.append(
                    f"input_mutation: after the timed calls, read-only input {name} of input set {index} is not "
                    "what the judge gave"
                )
    outputs = {o.name for o in contract.outputs}
    stages = {s.name: s for s in contract.stages}
    if not slots or {name for _, _, name, _ in slots} != outputs:
        return 0, flags + ["warmup_detection: the timing process sent back no timed answer for some output"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    golden: dict[int, dict[str, torch.Tensor]] = {}
    checked = 0
    for slot, set_index, name, answer in sorted(slots, key=lambda item: item[:3]):
        if set_index >= len(pool):
            flags.append(f"warmup_detection: output slot {slot} claims an input set ({set_index}) the judge never made")
            continue
        if set_index not in golden:
            golden[set_index] = reference_outputs(task, pool[set_index], outputs, device)
        metrics = compare_to_golden(answer, golden[set_index], stages[name], contract.tolerance(dtype, name), device=device)
        checked += 1
        if not metrics.passed:
            flags.append(
                f"warmup_detection: the answer a timed call left in output slot {slot} (input set {set_index}) fails "
                f"stage {name}: {'; '.join(metrics.reasons)[:300]}"
            )
    if len(samples) < sampled:
        return checked, flags + [f"content_replay: the timing process kept {len(samples)} sampled timed calls, not {sampled}"]
    got, wrong = check_sampled_answers(task, pool, samples, dtype, read_only, device)
    return checked + got, flags + wrong


# The timed calls a timing process keeps at least: `wire.SAMPLED_ANSWERS`, or every one where a round times fewer (a
# round times at least 3 calls; the CPU rehearsal's, exactly 3).
SAMPLED_AT_LEAST = min(wire.SAMPLED_ANSWERS, 3)


def check_sampled_answers(
    task: Task,
    pool: list[dict[str, torch.Tensor]],
    samples: dict[int, tuple[int, dict[str, torch.Tensor]]],
    dtype: str,
    read_only: list[str],
    device: str,
    what: str = "sampled timed call {number} (input set {set_index} with a few elements moved)",
) -> tuple[int, list[str]]:
    """(answers checked, flags) for the timed calls the timing process kept at random (`AnswerSample`), each on its
    set with a few elements moved: the judge moves the same elements of its own copy, after checking that the
    move is one (the values written are the values that were there, in another order, at as many positions as the
    timing process must move) and runs the reference on it. A wrong answer that is the unchanged set's (within the
    stage's tolerance) was replayed from a cache keyed on the content: `content_replay`; any other wrong answer is
    math done differently once timed: `warmup_detection`. `what` names a call in the flags (the runner's call on moved
    inputs is checked here too: `check_moved_call`)."""
    contract = task.contract
    outputs = {o.name for o in contract.outputs}
    flags: list[str] = []
    checked = 0
    for number, (set_index, entries) in sorted(samples.items()):
        call = what.format(number=number, set_index=set_index)
        changed, why = _changed_set(pool, set_index, entries, read_only)
        if changed is None or set(entries) & outputs != outputs:
            flags.append(f"content_replay: {call}: {why or 'an output is missing'}")
            continue
        golden = reference_outputs(task, changed, outputs, device)
        unchanged: dict[str, torch.Tensor] = {}
        for name in sorted(outputs):
            checked += 1
            failed = _fails(task, entries[name], golden, name, dtype, device)
            if failed is None:
                continue
            unchanged = unchanged or reference_outputs(task, pool[set_index], outputs, device)
            replayed = _fails(task, entries[name], unchanged, name, dtype, device) is None
            verdict = "the unchanged set's answer, replayed" if replayed else "not the reference's"
            flags.append(
                f"{'content_replay' if replayed else 'warmup_detection'}: the answer of the {call} fails stage {name}, "
                f"{verdict}: {failed[:300]}"
            )
    return checked, flags


def check_moved_call(
    task: Task, inputs: dict[str, torch.Tensor], got: dict[str, torch.Tensor], dtype: str, read_only: list[str], device: str
) -> tuple[int, list[str]]:
    """(answers checked, flags) for the runner's call on moved inputs (`wire.CandidateJob.moved_call`, `wire.moved_key`),
    against the reference on `inputs`, the judge's own copy of the variant's inputs, moved as the call's record says:
    the same check as a sampled timed call's (`check_sampled_answers`). A variant that gave no such call is a flag."""
    samples: dict[int, tuple[int, dict[str, torch.Tensor]]] = {}
    for key, tensor in got.items():
        if sample := wire.parse_sample_key(key):
            number, set_index, name = sample
            samples.setdefault(number, (set_index, {}))[1][name] = tensor
    if not samples:
        return 0, ["content_replay: the call on moved inputs left no answer"]
    return check_sampled_answers(task, [inputs], samples, dtype, read_only, device, what="call on moved inputs")


def _fails(task: Task, answer: torch.Tensor, golden: dict[str, torch.Tensor], name: str, dtype: str, device: str) -> str | None:
    """Why `answer` fails output stage `name` against the golden set `golden`, or None where it passes."""
    contract = task.contract
    stage = contract.stage(name)
    metrics = compare_to_golden(answer, golden, stage, contract.tolerance(dtype, name), device=device)
    return None if metrics.passed else "; ".join(metrics.reasons)


def _changed_set(
    pool: list[dict[str, torch.Tensor]], set_index: int, entries: dict[str, torch.Tensor], read_only: list[str]
) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The judge's copy of input set `set_index` with the elements a sampled call moved moved the same way; None and
    why where the record is not such a move."""
    if set_index >= len(pool):
        return None, f"it claims an input set ({set_index}) the judge never made"
    changed = dict(pool[set_index])
    for name in read_only:
        original = pool[set_index][name]
        count = wire.changed_count(original.numel())
        if not original.is_floating_point() or count == 0:
            continue
        at, to = entries.get(wire.CHANGED_AT + name), entries.get(wire.CHANGED_TO + name)
        if at is None or to is None or at.dtype != torch.int64 or at.dim() != 1 or to.shape != at.shape:
            return None, f"its record of the moved elements of {name} is missing"
        if at.numel() != count:
            return None, f"it moved {at.numel()} elements of {name}, not {count}"
        if int(at.min()) < 0 or int(at.max()) >= original.numel() or at.unique().numel() != at.numel():
            return None, f"its moved positions of {name} are not distinct positions of the input"
        flat, at, to = original.reshape(-1).clone(), at.to(original.device), to.to(original.device)
        if to.dtype != flat.dtype or not _same_values(to, flat[at]):
            return None, f"the values it wrote into {name} are not the ones that were there"
        flat[at] = to
        changed[name] = flat.view(original.shape)
    return changed, ""


# An integer dtype of each floating-point element size, to compare bit patterns.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one dtype hold the same values in some order, as bit patterns: a moved element is an
    exact copy, and a NaN among them (an edge case's input) equals nothing as a number. Float8 (quantized storage
    read in place) has neither sort nor equal on the CPU either."""
    if a.is_floating_point():
        a, b = a.view(_BITS[a.element_size()]), b.view(_BITS[b.element_size()])
    return torch.equal(a.sort().values, b.sort().values)


def reference_outputs(task: Task, inputs: dict[str, torch.Tensor], outputs: set[str], device: str) -> dict[str, torch.Tensor]:
    """The reference's `outputs` for one input set, and the companions their stages declare (`compare_to_golden`), run
    on a copy of it on `device`. Every other stage the reference returns, and the copy, are freed when this returns,
    before the next set's run: on the MLA gate a float64 run holds several copies of the cache (the cache stage itself
    among them); held through the next set's run, the previous set's stages and copy made the check's own process peak
    at 29.7 GiB of an H100 in this phase."""
    copy = {name: tensor.to(device, copy=True) for name, tensor in inputs.items()}
    with torch.no_grad():
        computed = task.reference(copy, dict(task.contract.params))
    stages = [task.contract.stage(name) for name in outputs]
    kept = set(outputs) | {companion for s in stages for companion in (s.error_scale, s.exact_within) if companion}
    return {name: computed[name].detach() for name in kept}


def check_replayed_answers(
    task: Task,
    pool: list[dict[str, torch.Tensor]],
    fresh: list[dict[str, torch.Tensor]],
    answers_file: Path,
    dtype: str,
    golden: dict[tuple[str, int], dict[str, torch.Tensor]] | None = None,
) -> tuple[int, list[str]]:
    """(answers checked, flags) for the candidate's CUDA-graph replays (`ferret.bench.graph`): each on an input set
    copied into the captured buffers, a fresh draw of the judge's or a pool set, checked against the reference on
    the judge's own copy of that set. A wrong answer is a call that does not work inside a graph: a host-side branch
    or value frozen at capture (`graph_frozen`, docs/cheats.md 32). Every set the timer must replay
    (`replay_plan`) must be there. `golden` keeps the reference's outputs per set across calls (one per timing
    process of a case)."""
    try:
        answers = load_file(str(answers_file))
    except Exception as err:  # noqa: BLE001 - written in the candidate's process: any damage is a finding
        return 0, [f"graph_frozen: the timing process's answers are missing or unreadable ({type(err).__name__})"]
    contract = task.contract
    outputs = {o.name for o in contract.outputs}
    sets = {(source, index): inputs for source, index, inputs in replay_plan(pool, fresh)}
    replayed: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    for key, tensor in answers.items():
        if parsed := wire.parse_graph_key(key):
            source, index, name = parsed
            replayed.setdefault((source, index), {})[name] = tensor
    missing = sorted(f"{source}{index}" for source, index in sets if set(replayed.get((source, index), {})) != outputs)
    if missing:
        return 0, [f"graph_frozen: the timing process sent back no CUDA-graph replay answers for input sets {missing}"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    checked, flags = 0, []
    golden = {} if golden is None else golden
    for (source, index), inputs in sets.items():
        if (source, index) not in golden:
            golden[(source, index)] = reference_outputs(task, inputs, outputs, device)
        for name in sorted(outputs):
            checked += 1
            failed = _fails(task, replayed[(source, index)][name], golden[(source, index)], name, dtype, device)
            if failed is not None:
                flags.append(
                    f"graph_frozen: a CUDA-graph replay of the candidate's captured call on {source} input set {index}, "
                    f"copied into the captured buffers, fails stage {name}: {failed[:300]}"
                )
    return checked, flags
