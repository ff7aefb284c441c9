"""The GPU's SM clock, read by the judge through NVML while each timed round runs (`RoundClocks`).

A round of a short case can read faster or slower than the rest of its case for reasons no process records:
rmsnorm decode's candidate (a ~5.5 us kernel) read 4.80 us in one round of five and 5.46-5.53 in the others
(H200), with no late calls to explain it. A kernel that short is bound by latency,
which follows the SM clock; GPU boost moves that clock with power and temperature, and the judge never changes
clocks or power settings (users often cannot). So the judge reads the clock every poll while a round runs and
the verdict says, per round, the lowest and highest it saw: a round at other clocks than the rest shows it.
The clock informs a reader; it never decides a verdict.

NVML is the driver's own library (`libnvidia-ml.so.1`, beside every NVIDIA driver): read through ctypes, no
package needed. Without it (the CPU, another vendor) there are no clocks and nothing else changes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field

NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
NVML_CLOCK_SM = 1


class SmClock:
    """One GPU's current SM clock (MHz), as NVML reports it."""

    def __init__(self, nvml: ctypes.CDLL, handle: ctypes.c_void_p):
        self._nvml, self._handle = nvml, handle

    @classmethod
    def of_pci_bus(cls, bus_id: str, library: str = NVML_LIBRARY) -> SmClock | None:
        """The GPU at `bus_id` ("domain:bus:device.function", hexadecimal); None when NVML is missing or refuses."""
        try:
            nvml = ctypes.CDLL(library)
            if nvml.nvmlInit_v2() != NVML_SUCCESS:
                return None
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle)) != NVML_SUCCESS:
                return None
        except (OSError, AttributeError):
            return None
        return cls(nvml, handle)

    def mhz(self) -> int | None:
        value = ctypes.c_uint()
        got = self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(value))
        return int(value.value) if got == NVML_SUCCESS else None


def torch_gpu_bus_id(index: int = 0) -> str | None:
    """The PCI bus id of torch's GPU `index` (after CUDA_VISIBLE_DEVICES), in NVML's accepted form."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    domain, bus, device = (getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if bus is None or device is None:
        return None
    return f"{domain or 0:x}:{bus:x}:{device:x}.0"


@dataclass
class RoundClocks:
    """What `read` (MHz, or None) gave while each round ran, per (case, role): per round, [lowest, highest]."""

    read: Callable[[], int | None]
    rounds: dict[tuple[int, str], dict[int, list[int]]] = field(default_factory=dict)

    @classmethod
    def of_torch_gpu(cls) -> RoundClocks | None:
        bus_id = torch_gpu_bus_id()
        clock = SmClock.of_pci_bus(bus_id) if bus_id is not None else None
        return cls(clock.mhz) if clock is not None else None

    def add(self, case: int, role: str, round_number: int, samples: list[int | None]) -> None:
        seen = [s for s in samples if s is not None]
        if seen:
            self.rounds.setdefault((case, role), {})[round_number] = [min(seen), max(seen)]

    def of(self, case: int, role: str) -> list[list[int]]:
        """[lowest, highest] per round of `role` on `case`, in round order (rounds without a reading left out)."""
        per_round = self.rounds.get((case, role), {})
        return [per_round[number] for number in sorted(per_round)]
