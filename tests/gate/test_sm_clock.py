"""The SM clock the judge reads while each round runs (`ferret.gate.sm_clock`): NVML's absence is no error, and
the readings are filed per case, role and round as [lowest, highest]."""

from __future__ import annotations

import pytest

from ferret.gate.sm_clock import RoundClocks, SmClock


def test_without_nvml_there_is_no_clock_and_no_error():
    assert SmClock.of_pci_bus("0:3b:0.0", library="libnvidia-ml-not-here.so.1") is None


def test_a_round_keeps_its_lowest_and_highest_reading_and_rounds_come_in_order():
    clocks = RoundClocks(read=lambda: None)
    clocks.add(0, "candidate", 1, [1980, None, 1755, 1890])
    clocks.add(0, "candidate", 0, [1980, 1980])
    clocks.add(0, "candidate", 2, [None, None])  # no reading: the round is left out, not invented
    clocks.add(1, "reference", 0, [1410])
    assert clocks.of(0, "candidate") == [[1980, 1980], [1755, 1980]]
    assert clocks.of(1, "reference") == [[1410, 1410]]
    assert clocks.of(0, "reference") == []


@pytest.mark.gpu
def test_on_the_gpu_the_clock_reads_a_plausible_sm_clock():
    clocks = RoundClocks.of_torch_gpu()
    assert clocks is not None, "NVML (libnvidia-ml.so.1) did not answer for torch's GPU"
    mhz = clocks.read()
    assert mhz is not None and 100 <= mhz <= 5000
