"""The judge's check of the answers given while timed.

The timing process runs the candidate's code, so nothing in it may know a right answer. It sends back
every timed call's answer (as that call left it in its output buffer) with the re-randomized input set
it answered. Here, in the judge's process, the canonical reference is run on each of those input sets
and every answer is compared with the contract's tolerance for its output stage. A candidate that is
honest in the correctness runs and cuts work once timed (cheats.md 17, and 16 when it replays) fails here
even where the timing process's own fingerprint re-check agrees with it.

Answers file layout (safetensors): `set{i}.{input}` for the floating-point read-only inputs of pool set
`i`, and `slot{j}.set{i}.{output}` for the answer left in output slot `j` by a timed call on set `i`.
The other inputs of every set are the gate's own (integer inputs keep their meaning; in-place inputs start
from the gate's state, as each timed call on them rewrites the same entries).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import load_file

_SLOT = re.compile(r"^slot(\d+)\.set(\d+)\.(.+)$")
_SET = re.compile(r"^set(\d+)\.(.+)$")


def check_timed_answers(contract_path: Path, contract, gate_inputs_file: Path, answers_file: Path, dtype: str) -> tuple[int, list[str]]:
    """(answers checked, flags naming each wrong one). A missing or unreadable answers file is itself a flag."""
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.gate.metrics import compare_stage

    try:
        answers = load_file(str(answers_file))
    except Exception as err:  # noqa: BLE001 - the file is written in the candidate's process: any damage is a finding
        return 0, [f"warmup_detection: the timing process's answers are missing or unreadable ({type(err).__name__})"]
    gate_inputs = load_file(str(gate_inputs_file))
    sets: dict[int, dict[str, torch.Tensor]] = {}
    slots: list[tuple[int, int, str, torch.Tensor]] = []
    for key, tensor in answers.items():
        if match := _SLOT.match(key):
            slots.append((int(match[1]), int(match[2]), match[3], tensor))
        elif match := _SET.match(key):
            sets.setdefault(int(match[1]), {})[match[2]] = tensor
    outputs = {o.name for o in contract.outputs}
    stages = {s.name: s for s in contract.stages}
    if not slots or {name for _, _, name, _ in slots} != outputs:
        return 0, ["warmup_detection: the timing process sent back no timed answer for some output"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reference = load_entry(contract.reference.entry, project_root_of(contract_path))
    golden: dict[int, dict[str, torch.Tensor]] = {}
    flags = []
    checked = 0
    for slot, set_index, name, answer in sorted(slots, key=lambda item: item[:3]):
        if set_index not in golden:
            replaced = sets.get(set_index, {})
            unknown = set(replaced) - set(gate_inputs)
            if unknown:
                flags.append(f"warmup_detection: answers name inputs the contract does not have: {sorted(unknown)}")
                return checked, flags
            inputs = {n: replaced.get(n, t).to(device, copy=True) for n, t in gate_inputs.items()}
            with torch.no_grad():
                computed = reference(inputs, dict(contract.params))
            golden[set_index] = {n: computed[n].detach() for n in outputs}
        metrics = compare_stage(answer, golden[set_index][name], stages[name], contract.tolerance(dtype, name), device=device)
        checked += 1
        if not metrics.passed:
            flags.append(
                f"warmup_detection: the answer a timed call left in output slot {slot} (input set {set_index}) fails "
                f"stage {name}: {'; '.join(metrics.reasons)[:300]}"
            )
    return checked, flags
