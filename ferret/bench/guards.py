"""What makes a timing hard to fool, as plain functions the timing process uses (and tests can reach
without a GPU): a pool of re-randomized inputs larger than L2, the floor from datasheet peaks (the work
counted by `ferret.contract.roofline`),
and the persisting-L2 reset."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable

import torch

# Datasheet peaks (not measured ceilings, which an honest kernel may exceed): dense bf16 tensor-core
# rate and HBM bandwidth. A time under bytes/bandwidth (or flops/rate) is physically impossible.
DATASHEET_PEAKS = {
    "H200": {"bytes_per_s": 4.8e12, "flops_per_s": 989e12, "l2_bytes": 60 << 20},
    "H100": {"bytes_per_s": 3.35e12, "flops_per_s": 989e12, "l2_bytes": 50 << 20},
    "A100": {"bytes_per_s": 2.039e12, "flops_per_s": 312e12, "l2_bytes": 40 << 20},
}
# A measured time below this fraction of the floor is rejected (the floor itself is already optimistic).
FLOOR_MARGIN = 0.9
SUSPICIOUS_SPEEDUP = 10.0
# A reference round whose interference probe ran this much slower than the check's fastest probe shared the
# GPU with other work: its times are not used.
INTERFERENCE_TOLERANCE = 1.15


def peaks_for(device_name: str) -> dict | None:
    for key, peaks in DATASHEET_PEAKS.items():
        if key in device_name:
            return peaks
    return None


def l2_bytes_of(device: str) -> int:
    """The L2 size the input pool must outgrow: the datasheet's for a known GPU (64 MiB for an unknown one);
    0 on the CPU, where the rehearsal keeps the pool at its minimum of two sets (the interpreter is slow)."""
    if device != "cuda":
        return 0
    # Without a visible device here the timing process reports the failure itself, with its own message.
    peaks = peaks_for(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    return peaks["l2_bytes"] if peaks else 64 << 20


def floor_ms(min_bytes: int, min_flops: float, peaks: dict) -> float:
    return 1e3 * max(min_bytes / peaks["bytes_per_s"], min_flops / peaks["flops_per_s"])


def input_pool(
    inputs: dict[str, torch.Tensor],
    read_only_float: list[str],
    target_bytes: int,
    max_sets: int = 64,
    generator: torch.Generator | None = None,
) -> list[dict[str, torch.Tensor]]:
    """Copies of the inputs at fresh addresses, enough of them to exceed `target_bytes` together, each
    with its floating-point read-only inputs re-randomized (a small relative perturbation keeps them
    inside the case's distribution), so no timed call can be answered from an earlier one."""
    one_set = sum(t.numel() * t.element_size() for t in inputs.values())
    count = max(2, min(max_sets, math.ceil(target_bytes / max(one_set, 1))))
    pool = []
    for index in range(count):
        copy = {k: v.clone() for k, v in inputs.items()}
        if index:
            for name in read_only_float:
                t = copy[name]
                noise = torch.randn(t.shape, generator=generator, dtype=torch.float32, device="cpu").to(t.device)
                scale = t.float().abs().mean().clamp_min(1e-3) * 0.01
                copy[name] = (t.float() + noise * scale).to(t.dtype)
        pool.append(copy)
    return pool


def interference_probe(buffer: torch.Tensor, warm: Callable[[], None], calls: int = 5) -> Callable[[], float]:
    """A fixed piece of GPU work (one half of `buffer` copied onto the other) whose time, measured with events,
    is the same every time the GPU is otherwise idle. The reference timer runs it around each of its rounds:
    a probe slower than the check's fastest means something else ran on the GPU meanwhile (work queued by
    the candidate's process before it was stopped, or a process it left behind).

    `warm` (a short spin kernel) runs first and the copies are queued behind it: a GPU left idle while a case
    was set up lowers its clocks, and a probe taken then read slow (the H200 marked honest first rounds
    interfered while their times matched every other round's)."""
    half = buffer.numel() // 2
    source, target = buffer[:half], buffer[half : 2 * half]

    def probe_ms() -> float:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        warm()
        for start, end in events:
            start.record()
            target.copy_(source)
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events)

    return probe_ms


def interfered_rounds(probes_ms: list[float], tolerance: float = INTERFERENCE_TOLERANCE) -> list[int]:
    """The rounds (0-based) whose probe, before or after, was slower than `tolerance` x the fastest probe;
    `probes_ms` holds two probes per round."""
    if not probes_ms:
        return []
    fastest = min(probes_ms)
    return sorted({i // 2 for i, p in enumerate(probes_ms) if p > tolerance * fastest})


def reset_persisting_l2() -> str:
    """Set the persisting-L2 limit to 0 and reset persisting lines, so an access-policy window set by a
    candidate cannot keep its data resident across the flush. Returns what was done."""
    try:
        import ctypes

        import torch.cuda

        libcudart = None
        for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
            try:
                libcudart = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if libcudart is None:
            import glob
            import os

            import nvidia  # type: ignore[import-not-found]

            for root in nvidia.__path__:
                for path in glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True):
                    libcudart = ctypes.CDLL(path)
                    break
        if libcudart is None:
            return "not reset: libcudart not found"
        cuda_limit_persisting_l2_cache_size = 0x06
        torch.cuda.synchronize()
        set_limit = libcudart.cudaDeviceSetLimit(cuda_limit_persisting_l2_cache_size, ctypes.c_size_t(0))
        reset = libcudart.cudaCtxResetPersistingL2Cache()
        return f"reset (cudaDeviceSetLimit -> {set_limit}, cudaCtxResetPersistingL2Cache -> {reset})"
    except Exception as err:  # noqa: BLE001 - report, do not fail the timing
        return f"not reset: {type(err).__name__}: {err}"[:200]


# torch's own kernels, as the profiler names them (demangled): `void at::native::...`, torch's copy of CUB
# (`at_cuda_detail::cub::...`), `c10::...`. Their compute is the ATen watch's to judge in the candidate's runner.
_TORCH_KERNEL = re.compile(r"(?<![\w:])(at|at_cuda_detail|c10)::")
_NOT_A_KERNEL = ("Memcpy", "Memset")
_MANGLED_IDENTIFIER = re.compile(r"(\d+)")


def _identifiers_of_mangled(name: str) -> set[str]:
    """The length-prefixed identifiers of an Itanium-mangled name (`_Z6rmsnormPf` -> {"rmsnorm"}; a nested or
    templated name gives its components and type names too)."""
    found, index = set(), 2
    while index < len(name):
        match = _MANGLED_IDENTIFIER.match(name, index)
        if match is None:
            index += 1
            continue
        length, start = int(match.group(1)), match.end()
        found.add(name[start : start + length])
        index = start + length
    return found


def _short_name(demangled: str) -> str:
    """`void ns::kernel<4>(float*)` -> `kernel`: the function's own name, as a launch names it."""
    head = demangled.split("(", 1)[0].split("<", 1)[0].strip()
    return head.rsplit(" ", 1)[-1].rsplit("::", 1)[-1]


def foreign_kernels(executed: dict[str, int], launched: dict[str, int]) -> dict[str, int]:
    """Kernels that ran during the candidate's calls (`executed`, the profiler's names and counts) that neither its
    counted launches (`launched`: Triton's launch entry points and `cuda.Source.launch`, by name) nor torch's own
    kernels account for: library compute reached around the launch counter (CuPy's array operations, cuBLAS or
    cuDNN called directly). A launched name is matched exactly, and then ran no more often than it was launched
    (a kernel named like a library's cannot cover for it); a C++ (mangled) launch name by its function's name."""
    mangled = set().union(*(_identifiers_of_mangled(n) for n in launched if n.startswith("_Z")))
    foreign = {}
    for name, count in executed.items():
        if name.startswith(_NOT_A_KERNEL) or _TORCH_KERNEL.search(name):
            continue
        if name in launched:
            if count > launched[name]:
                foreign[name] = count - launched[name]
        elif _short_name(name) not in mangled:
            foreign[name] = count
    return foreign
