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
  fingerprint re-check agrees with it.

Answers file layout (safetensors, keys from `ferret.wire`): `pool_key(i, input)` for the floating-point
read-only inputs of pool set `i` after timing, and `slot_key(j, i, output)` for the answer left in output
slot `j` by a timed call on set `i`. In-place inputs of every set start from the gate's state, as each
timed call on them rewrites the same entries.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ferret import wire
from ferret.contract.task import Task
from ferret.gate.metrics import bitwise_equal, compare_stage


def check_timed_answers(
    task: Task, pool: list[dict[str, torch.Tensor]], answers_file: Path, dtype: str, read_only: list[str]
) -> tuple[int, list[str]]:
    """(answers checked, flags naming each wrong one) for the timed calls on `pool`, the judge's own copy of
    the input sets. A missing or unreadable answers file is itself a flag."""
    contract = task.contract
    try:
        answers = load_file(str(answers_file))
    except Exception as err:  # noqa: BLE001 - the file is written in the candidate's process: any damage is a finding
        return 0, [f"warmup_detection: the timing process's answers are missing or unreadable ({type(err).__name__})"]
    flags = []
    slots: list[tuple[int, int, str, torch.Tensor]] = []
    for key, tensor in answers.items():
        if slot := wire.parse_slot_key(key):
            slots.append((*slot, tensor))
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
        metrics = compare_stage(answer, golden[set_index][name], stages[name], contract.tolerance(dtype, name), device=device)
        checked += 1
        if not metrics.passed:
            flags.append(
                f"warmup_detection: the answer a timed call left in output slot {slot} (input set {set_index}) fails "
                f"stage {name}: {'; '.join(metrics.reasons)[:300]}"
            )
    return checked, flags


def reference_outputs(task: Task, inputs: dict[str, torch.Tensor], outputs: set[str], device: str) -> dict[str, torch.Tensor]:
    """The reference's `outputs` for one input set, run on a copy of it on `device`. Every other stage the reference
    returns, and the copy, are freed when this returns, before the next set's run: on the MLA gate a float64 run holds
    several copies of the cache (the cache stage itself among them); held through the next set's run, the previous set's stages
    and copy made the check's own process peak at 29.7 GiB of an H100 in this phase."""
    copy = {name: tensor.to(device, copy=True) for name, tensor in inputs.items()}
    with torch.no_grad():
        computed = task.reference(copy, dict(task.contract.params))
    return {name: computed[name].detach() for name in outputs}
