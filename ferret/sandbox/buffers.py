"""The buffers the judge hands a candidate, and what is checked about them after every call.

Used by the candidate's runner and by the candidate's timer (`ferret.bench.process`).

- **Guard regions.** Every input and output lives in the middle of a larger allocation, with random bytes
  before and after it (`Guarded`): the tensor handed out is a contiguous view there (its `storage_offset` is
  not 0, its data as aligned as the allocation: 512 bytes on the GPU). A kernel that writes past an
  output's end or before an input's start changes guard bytes, which a value check would never see and a
  serving engine would pay for with a corrupted neighbour (its KV cache).
- **Retired buffers.** A call's buffers are not handed back to the allocator when the call is done: they are
  refilled with one random byte and kept (`Retired`) while the next calls run, so a kernel that writes through
  a pointer kept from an earlier call (memory that is free from its point of view) changes bytes the judge
  watches.
- **Storage-level identity.** Before a call the judge records each tensor's storage, data pointer, shape,
  strides, storage offset and dtype (`Layout`); after it, each must be the same tensor object with the same
  record. `set_`, `as_strided_`, `resize_`, `.data =`, or any of them reached by a computed name, re-point or
  re-label a tensor in place, which the identity of the Python object alone does not show.
- **Pre-fill that varies call to call** (`PREFILLS`, `prefills_for`): NaN on a variant's first call (so an
  output left unwritten is named by its NaN), then random values, zeros and a stale answer of other inputs in a
  random order over the later calls, so a kernel that reads its outputs before writing them (writes only where
  NaN, returns when they already hold numbers, accumulates into them) gives different bytes on some call.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

import numpy
import torch

from ferret import wire

ALIGN = 512  # bytes: the caching allocator's block alignment; TMA descriptors need 16
GUARD_MIN_BYTES = 4096
GUARD_MAX_BYTES = 1 << 20

NAN, RANDOM, ZEROS, STALE = "nan", "random", "zeros", "stale"
PREFILLS = (NAN, RANDOM, ZEROS, STALE)

DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}


class OutputRelabelled(Exception):
    """An input or output was re-pointed or re-labelled in place (its storage, pointer, shape, strides, offset or
    dtype changed), or its entry in the dict replaced."""


class WroteOutside(Exception):
    """Bytes outside every buffer the call was given changed: a guard region, or a buffer of an earlier call."""


def guard_bytes(shape: tuple[int, ...], element_size: int) -> int:
    """A guard's size: one leading-dimension row of the tensor (a write one row past the end lands in it whole),
    at least 4 KiB, at most 1 MiB, a multiple of `ALIGN` so that the view after it stays aligned."""
    numel = 1
    for dim in shape:
        numel *= dim
    row = numel * element_size // shape[0] if shape and shape[0] > 0 else numel * element_size
    size = min(max(row, GUARD_MIN_BYTES), GUARD_MAX_BYTES)
    return -(-size // ALIGN) * ALIGN


def _random_bytes(count: int, device: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(secrets.token_bytes(count)), dtype=torch.uint8).to(device)


def _differing(bytes_: torch.Tensor, expected: torch.Tensor | int) -> int:
    """How many bytes differ from `expected` (bytes of the same length, or one value). On the host through NumPy:
    torch's elementwise compare and sum cost milliseconds a call on small host tensors, which the interpreter's
    many small buffers multiplied into seconds a check."""
    if bytes_.device.type == "cpu":
        other = expected if isinstance(expected, int) else expected.numpy()
        return int(numpy.count_nonzero(bytes_.numpy() != other))
    return int((bytes_ != expected).sum())


@dataclass
class Layout:
    """What a tensor is at the storage level: re-pointing or re-labelling it in place changes one of these."""

    storage: int
    storage_bytes: int
    data_ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: str

    @staticmethod
    def of(tensor: torch.Tensor) -> Layout:
        storage = tensor.untyped_storage()
        return Layout(
            storage=storage.data_ptr(),
            storage_bytes=storage.nbytes(),
            data_ptr=tensor.data_ptr(),
            shape=tuple(tensor.shape),
            strides=tuple(tensor.stride()),
            offset=int(tensor.storage_offset()),
            dtype=str(tensor.dtype).removeprefix("torch."),
        )

    def changes(self, now: Layout) -> list[str]:
        """Each property that differs, in words: `strides (64, 1) -> (1, 64)`."""
        names = {
            "storage": "storage",
            "storage_bytes": "storage size",
            "data_ptr": "data_ptr",
            "shape": "shape",
            "strides": "strides",
            "offset": "storage offset",
            "dtype": "dtype",
        }
        return [
            f"{words} {_show(getattr(self, key))} -> {_show(getattr(now, key))}"
            for key, words in names.items()
            if getattr(self, key) != getattr(now, key)
        ]


def _show(value: object) -> str:
    return hex(value) if isinstance(value, int) and value > 1 << 16 else str(value)


@dataclass
class Guarded:
    """One tensor in the middle of its own allocation, with random guard bytes before and after it."""

    name: str
    buffer: torch.Tensor  # uint8: the whole allocation
    tensor: torch.Tensor  # the view handed to the candidate
    lead: int  # bytes before the view
    size: int  # bytes of the view
    before: torch.Tensor  # the guard bytes as written
    after: torch.Tensor

    def changed(self) -> tuple[int, int]:
        """How many guard bytes changed before and after the tensor."""
        end = self.lead + self.size
        return _differing(self.buffer[: self.lead], self.before), _differing(self.buffer[end:], self.after)


def guarded_empty(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> Guarded:
    """An uninitialised contiguous tensor of `shape` inside an allocation with a guard region each side."""
    element = torch.empty(0, dtype=dtype).element_size()
    guard = guard_bytes(shape, element)
    numel = 1
    for dim in shape:
        numel *= dim
    size = numel * element
    buffer = torch.empty(guard + size + guard, dtype=torch.uint8, device=device)
    tensor = buffer[guard : guard + size].view(dtype).view(shape)
    before, after = _random_bytes(guard, device), _random_bytes(guard, device)
    buffer[:guard].copy_(before)
    buffer[guard + size :].copy_(after)
    return Guarded(name, buffer, tensor, guard, size, before, after)


@dataclass
class Retired:
    """A buffer of an earlier call, refilled with one random byte and kept while later calls run."""

    what: str
    buffer: torch.Tensor
    byte: int

    def changed(self) -> int:
        return _differing(self.buffer, self.byte)


def prefills_for(calls: int) -> list[str]:
    """The pre-fill of each of a variant's calls after the first (whose fill is NaN): random values, zeros and a
    stale answer, in an order drawn afresh each variant, each used before any is used again, so that every fill
    is met whenever there are three later calls or more."""
    order: list[str] = []
    while len(order) < calls:
        more = [RANDOM, ZEROS, STALE]
        random.SystemRandom().shuffle(more)
        order += more
    return order[:calls]


def fill(tensor: torch.Tensor, how: str, stale: torch.Tensor | None = None) -> torch.Tensor:
    """Write the pre-fill `how` into `tensor`; returns what was written (to count entries left as filled)."""
    if how == NAN:
        tensor.fill_(float("nan") if tensor.is_floating_point() else -1)
    elif how == ZEROS:
        tensor.zero_()
    elif how == STALE and stale is not None and stale.shape == tensor.shape and stale.dtype == tensor.dtype:
        tensor.copy_(stale)
    elif how == STALE and stale is not None and stale.numel() == tensor.numel():
        tensor.copy_(stale.reshape(tensor.shape).to(tensor.dtype))
    elif tensor.is_floating_point():
        # Drawn where the tensor lives: drawing rmsnorm's 4096 x 7168 output on this host alone took 0.29 s.
        generator = torch.Generator(tensor.device).manual_seed(secrets.randbits(63))
        tensor.copy_(torch.randn(tuple(tensor.shape), generator=generator, dtype=torch.float32, device=tensor.device))
    else:
        tensor.fill_(-1)
    return tensor.clone()


def moved_elements(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A copy of `tensor` with `wire.changed_count` of its elements, at distinct positions drawn from the OS's
    randomness, trading places (each picked element takes the value of the one picked before it), as the timed calls'
    inputs are changed (`ferret.bench.process.AnswerSample`). Returns (the copy, the flat positions, the values
    written there): the record the judge checks and repeats on its own copy (`ferret.gate.answers`)."""
    flat = tensor.detach().reshape(-1).clone()
    count = wire.changed_count(flat.numel())
    at = torch.tensor(sorted(random.SystemRandom().sample(range(flat.numel()), count)), dtype=torch.int64)
    moved = flat[at.to(flat.device)].roll(1)
    flat[at.to(flat.device)] = moved
    return flat.view(tensor.shape), at, moved.cpu()


def stale_answer(answer: torch.Tensor) -> torch.Tensor:
    """An answer of other inputs: the outputs of the variant's first call moved by one entry (the values of a real
    answer, none of them where it belongs unless the output is constant)."""
    return answer.detach().reshape(-1).roll(1).reshape(answer.shape).clone()


class CallBuffers:
    """One call's inputs and outputs, each guarded; checked after the call for re-labelling and writes outside,
    then retired (kept, refilled) so later calls' writes through kept pointers show."""

    def __init__(self, device: str):
        self.device = device
        self.guarded: list[Guarded] = []
        self.layouts: dict[str, tuple[torch.Tensor, Layout]] = {}
        self.fills: dict[str, torch.Tensor] = {}

    def _track(self, label: str, guarded: Guarded) -> torch.Tensor:
        self.guarded.append(guarded)
        self.layouts[label] = (guarded.tensor, Layout.of(guarded.tensor))
        return guarded.tensor

    def copy_of(self, name: str, source: torch.Tensor) -> torch.Tensor:
        """A guarded copy of the input `name`."""
        guarded = guarded_empty(f"input {name}", tuple(source.shape), source.dtype, self.device)
        guarded.tensor.copy_(source)
        return self._track(f"input {name}", guarded)

    def output(self, name: str, shape: list[int], dtype: str, how: str, stale: torch.Tensor | None = None) -> torch.Tensor:
        """A guarded output pre-filled as `how` says."""
        guarded = guarded_empty(f"output {name}", tuple(shape), DTYPES[dtype], self.device)
        self.fills[name] = fill(guarded.tensor, how, stale)
        return self._track(f"output {name}", guarded)

    def relabelled(self, inputs: dict, outputs: dict) -> list[str]:
        """Each input or output that is no longer the tensor handed out, or whose storage-level record changed."""
        found = []
        for label, (tensor, layout) in self.layouts.items():
            role, name = label.split(" ", 1)
            held = (inputs if role == "input" else outputs).get(name)
            if held is not tensor:
                found.append(f"{label}: the dict now holds another object ({type(held).__name__})")
                continue
            changes = layout.changes(Layout.of(tensor))
            if changes:
                found.append(f"{label}: {', '.join(changes)}")
        return found

    def writes_outside(self) -> list[str]:
        """Each guard region that changed, with how many of its bytes."""
        found = []
        for guarded in self.guarded:
            lead, trail = guarded.changed()
            if lead:
                found.append(f"{lead} of the {guarded.lead} guard bytes before {guarded.name}")
            if trail:
                found.append(f"{trail} of the {guarded.after.numel()} guard bytes after {guarded.name}")
        return found

    def left_as_filled(self, outputs: dict) -> dict[str, int]:
        """Per output, how many entries still hold their pre-fill bitwise (NaN counts as equal to NaN)."""
        counts = {}
        for name, filled in self.fills.items():
            tensor = outputs.get(name)
            if isinstance(tensor, torch.Tensor) and tensor.shape == filled.shape and tensor.dtype == filled.dtype:
                same = (tensor == filled) | (tensor.isnan() & filled.isnan()) if filled.is_floating_point() else tensor == filled
                counts[name] = int(same.sum())
        return counts

    def retire(self, call: str) -> list[Retired]:
        """Every buffer of this call, refilled with one random byte, to be watched while later calls run."""
        retired = []
        for guarded in self.guarded:
            byte = secrets.randbelow(256)
            if guarded.buffer.device.type == "cpu":
                guarded.buffer.numpy().fill(byte)  # as `_differing` says
            else:
                guarded.buffer.fill_(byte)
            retired.append(Retired(f"{guarded.name} of {call}", guarded.buffer, byte))
        self.guarded, self.layouts, self.fills = [], {}, {}
        return retired


class RetiredPool:
    """The buffers of a variant's earlier calls, kept while its later calls run (the last `keep` calls' worth)."""

    def __init__(self, keep: int = 3):
        self.keep = keep
        self.calls: list[list[Retired]] = []

    def add(self, retired: list[Retired]) -> None:
        self.calls = [*self.calls, retired][-self.keep :]

    def written(self) -> list[str]:
        found = []
        for retired in (r for call in self.calls for r in call):
            changed = retired.changed()
            if changed:
                found.append(f"{changed} bytes of the freed {retired.what}")
        return found


def _own_functions() -> dict[str, object]:
    """This module's functions and its classes' methods, by name: what the checks above run after a call."""
    found: dict[str, object] = {}
    for name, value in list(globals().items()):
        if isinstance(value, type) and value.__module__ == __name__:
            found.update({f"{name}.{attr}": member for attr, member in vars(value).items() if callable(member)})
        elif callable(value) and getattr(value, "__module__", None) == __name__:
            found[name] = value
    return found


_OWN = _own_functions()


def harness_changed() -> list[str]:
    """The names of this module's functions and methods that are no longer the ones it was loaded with: a
    candidate that replaced a check (`CallBuffers.writes_outside` returning nothing) is named for it."""
    now = _own_functions()
    return [f"buffers.{name}" for name, original in _OWN.items() if now.get(name) is not original]
