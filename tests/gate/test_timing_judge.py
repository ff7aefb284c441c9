"""The judge's reading of the timing processes' rounds (`ferret.gate.timing`), on literal numbers: medians
of kept rounds, the spread that marks a case unstable, rounds dropped for interference, the roofline floor
and where the candidate stands against it, and a target that unstable cases never help to meet."""

from __future__ import annotations

import pytest

from ferret import wire
from ferret.bench import guards
from ferret.contract.roofline import RooflineCount
from ferret.gate import timing

H200 = {"bytes_per_s": 4.8e12, "flops_per_s": 989e12, "l2_bytes": 0}


def _case(bytes_: int = 4_800_000, flops: int = 0) -> timing._Case:
    job = wire.TimingCaseJob("c", "pool", 2, {})
    return timing._Case(job, [], RooflineCount(bytes=bytes_, flops=flops, source="contract", explanation="literal"))


def _sides(candidate: list[float], baseline: list[float], probes: list[float] | None = None):
    mine = wire.TimingCaseResult(
        case="c",
        samples={"candidate": candidate},
        host_ms={"candidate": 0.01},
        pool_sets=2,
        persisting_l2="",
        flags=[],
        wall_ms=candidate[0],
    )
    theirs = wire.TimingCaseResult(
        case="c",
        samples={"baseline": baseline},
        host_ms={"baseline": None},
        pool_sets=2,
        persisting_l2="",
        flags=[],
        probes_ms=probes or [],
    )
    return timing.ProcessRounds.of([mine], len(candidate)), timing.ProcessRounds.of([theirs], len(baseline))


def test_medians_speedup_and_place_on_the_roofline():
    mine, theirs = _sides([0.010, 0.0101, 0.0099], [0.030, 0.0303, 0.0297])
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    assert (result.candidate_ms, result.baseline_ms) == (0.010, 0.030)
    assert result.speedup == pytest.approx(3.0)
    # 4.8 MB at 4.8 TB/s: a 1 us floor; the candidate's 10 us is a tenth of the way there, at 0.48 TB/s.
    assert result.floor_ms == pytest.approx(0.001)
    assert result.fraction_of_floor == pytest.approx(0.1)
    assert result.achieved_tb_per_s == pytest.approx(0.48)
    assert result.baseline_fraction_of_floor == pytest.approx(1 / 30)
    assert result.round_spread["candidate"] == pytest.approx(0.02) and not result.unstable


def test_flops_set_the_floor_when_the_work_outweighs_the_bytes():
    mine, theirs = _sides([1.0], [2.0])
    result = timing._case_timing(_case(bytes_=4_800_000, flops=989_000_000_000), mine, theirs, 1, [], H200, 0.1)
    assert result.floor_ms == pytest.approx(1.0)  # 989 GFLOP at 989 TFLOP/s: 1 ms, over the 1 us of bytes
    assert result.achieved_tflop_per_s == pytest.approx(989.0)


def test_rounds_that_disagree_make_the_case_unstable_and_it_never_counts():
    mine, theirs = _sides([0.010, 0.013, 0.010], [0.030, 0.030, 0.030])
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    assert result.unstable and "candidate's rounds spread 30.0%" in (result.unstable_reason or "")
    steady_mine, steady_theirs = _sides([0.010, 0.010, 0.010], [0.020, 0.020, 0.020])
    steady = timing._case_timing(_case(), steady_mine, steady_theirs, 3, [], H200, max_spread=0.10)
    task = type("T", (), {"contract": type("C", (), {"speed": type("S", (), {"min_speedup": 1.2})()})()})()
    verdict = timing._measured_result(task, "H200", "m", [result, steady], [])  # type: ignore[arg-type]
    assert verdict.unstable_cases == ["c"] and verdict.target_met is False
    assert verdict.geomean_speedup == pytest.approx(2.0)  # the steady case alone


def test_reference_rounds_with_interference_are_dropped_from_every_side():
    # Two probes per reference round; round 1's second probe is 40% slow: another process used the GPU.
    probes = [0.100, 0.101, 0.100, 0.140, 0.100, 0.100]
    mine, theirs = _sides([0.010, 0.010, 0.010], [0.030, 0.060, 0.030], probes)
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    assert result.interfered_rounds == [1]
    assert result.baseline_ms == 0.030  # the slowed round is out of the median and the spread
    assert result.unstable and "shared during reference rounds [1]" in (result.unstable_reason or "")
    assert "140.0" in (result.unstable_reason or "")  # the probes' own numbers, for whoever reads the verdict
    assert guards.interfered_rounds([0.1, 0.1, 0.1, 0.1]) == []


def test_a_candidate_under_the_floor_is_flagged_impossible():
    mine, theirs = _sides([0.0008], [0.030])
    result = timing._case_timing(_case(), mine, theirs, 1, [], H200, max_spread=0.10)
    assert any(f.startswith("impossible_speed: 0.80 us is under 0.9 x the 1.00 us floor") for f in result.flags), result.flags


def test_a_round_measured_by_the_host_makes_the_case_unstable():
    # Round 2's rounds agree with the others (the clock kept its few calls measured on the GPU alone), but most of
    # its calls were late: the host fell behind the spin even after the longer spins.
    mine, theirs = _sides([0.010, 0.010, 0.010], [0.030, 0.030, 0.030])
    mine.first.late_fraction = {"candidate": [0.0, 0.02, 0.8]}
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    assert result.unstable and "candidate's rounds [2] were mostly late calls" in (result.unstable_reason or "")
    assert result.late_fraction == {"candidate": [0.0, 0.02, 0.8]}
    mine.first.late_fraction = {"candidate": [0.0, 0.02, 0.5]}  # half late: the other half measured the GPU alone
    assert not timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10).unstable


def test_speed_lines_say_each_case_and_the_target():
    from ferret.gate.models import CaseTiming, TimingResult

    steady = CaseTiming(
        case="decode",
        candidate_ms=0.0055,
        baseline_ms=0.044,
        baseline_compiled_ms=0.0056,
        speedup=8.0,
        speedup_vs_compiled=1.018,
        fraction_of_floor=0.07,
    )
    shaky = CaseTiming(
        case="prefill",
        candidate_ms=0.034,
        baseline_ms=0.4156,
        speedup=12.2,
        unstable=True,
        unstable_reason="candidate rounds spread 14% (limit 10%)",
    )
    result = TimingResult(
        measured=True,
        cases=[steady, shaky],
        min_speedup_required=1.5,
        target_met=True,
        geomean_speedup=8.0,
        unstable_cases=["prefill"],
    )
    assert timing.speed_lines(result) == [
        "  speed decode: 5.5 us, 8.00x baseline, 1.02x torch.compile, 7.0% of the floor",
        "  speed prefill: 34.0 us, 12.20x baseline, UNSTABLE (candidate rounds spread 14% (limit 10%))",
        "speed: geomean 8.00x over the baseline, target 1.5x met; unstable (not counted): prefill",
    ]
    unset = result.model_copy(update={"cases": [steady], "min_speedup_required": None, "target_met": None, "unstable_cases": []})
    assert timing.speed_lines(unset)[-1] == "speed: geomean 8.00x over the baseline, target none set"


def test_speed_not_measured_names_the_failing_process_and_its_exception():
    from ferret.gate.models import TimingResult

    reason = (
        "the reference timing process failed before step '0 0': exited  Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        "ModuleNotFoundError: No module named 'tasks'\n"
    )
    assert timing.speed_lines(TimingResult(measured=False, reason=reason)) == [
        "speed not measured: the reference timing process failed before step '0 0': exited  Traceback (most recent "
        "call last): ... ModuleNotFoundError: No module named 'tasks'"
    ]
    assert timing.speed_lines(TimingResult(measured=False, reason="not timed: the candidate is not correct")) == [
        "speed not measured: not timed: the candidate is not correct"
    ]


def _candidate(times: list[float], flags: list[str] | None = None) -> wire.TimingCaseResult:
    return wire.TimingCaseResult(
        case="c",
        samples={"candidate": times},
        host_ms={"candidate": 0.01},
        pool_sets=2,
        persisting_l2="",
        flags=flags or [],
        wall_ms=times[0],
    )


def _reference(baseline: list[float], probes: list[float] | None = None) -> wire.TimingCaseResult:
    return wire.TimingCaseResult(
        case="c",
        samples={"baseline": baseline},
        host_ms={"baseline": None},
        pool_sets=2,
        persisting_l2="",
        flags=[],
        probes_ms=probes or [],
    )


def test_a_baseline_is_the_mean_over_reference_processes_of_each_ones_median():
    """Each process carries its own fixed offset (eager rope decode: 72 or 77 us by process, H200 2026-12-01). Five
    rounds over three processes (rounds 0 and 3, 1 and 4, 2): the mean of the processes' medians, not the median of
    the five rounds (which would be one process's value); their disagreement is no instability of the rounds."""
    mine = timing.ProcessRounds.of([_candidate([0.010] * 5)], 5)
    theirs = timing.ProcessRounds.of([_reference([0.072, 0.0722]), _reference([0.077, 0.0772]), _reference([0.072])], 5)
    result = timing._case_timing(_case(), mine, theirs, 5, [], H200, max_spread=0.05)
    assert result.samples["baseline"] == [0.072, 0.077, 0.072, 0.0722, 0.0772]  # the judge's round order
    assert result.process_ms["baseline"] == pytest.approx([0.0721, 0.0771, 0.072])
    assert result.baseline_ms == pytest.approx((0.0721 + 0.0771 + 0.072) / 3)
    assert result.round_spread["baseline"] == pytest.approx(0.0002 / 0.0721) and not result.unstable


def test_an_interfered_round_is_dropped_from_its_own_reference_process():
    """Process 1's probe after its only round (the judge's round 1) saw the GPU shared: that round goes, for the
    candidate too; the other processes' rounds stay."""
    mine = timing.ProcessRounds.of([_candidate([0.010, 0.020, 0.010])], 3)
    theirs = timing.ProcessRounds.of([_reference([0.030, 0.031], [0.01, 0.01, 0.01, 0.01]), _reference([0.050], [0.01, 0.05])], 3)
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    assert result.interfered_rounds == [1] and result.unstable
    assert result.candidate_ms == pytest.approx(0.010)
    assert result.baseline_ms == pytest.approx(0.0305)


def test_the_candidate_is_the_mean_over_its_timing_processes_and_every_processs_flags_count():
    """The candidate's timer carries a per-process offset too (rope decode's candidate: rounds within 0.1 us inside a
    check, 6.3 -> 6.6 us between checks, H200 2026-12-01): two candidate processes take rounds 0, 2, 4 and 1, 3."""
    mine = timing.ProcessRounds.of(
        [_candidate([0.0063, 0.0064, 0.0063]), _candidate([0.0066, 0.0066], ["warmup_detection: slot 0"])], 5
    )
    theirs = timing.ProcessRounds.of([_reference([0.075] * 5)], 5)
    result = timing._case_timing(_case(), mine, theirs, 5, [], H200, max_spread=0.05)
    assert result.samples["candidate"] == [0.0063, 0.0066, 0.0064, 0.0066, 0.0063]
    assert result.process_ms["candidate"] == pytest.approx([0.0063, 0.0066])
    assert result.candidate_ms == pytest.approx(0.00645)
    assert result.flags == ["warmup_detection: slot 0"]  # a flag of the second process is the verdict's
    assert not result.unstable  # 4.8% between processes; inside each, 1.6% and 0


@pytest.mark.parametrize(
    "floors_ms,device,repeats,expected",
    [
        ([0.0004, 0.056], "cuda", 5, (5, 2)),  # rope: decode's floor is 0.4 us, a short case
        ([0.0118, 0.040, 0.034], "cuda", 5, (1, 1)),  # MLA: every floor over 5 us
        (None, "cuda", 5, (5, 2)),  # a GPU without datasheet peaks: the floors are unknown
        ([0.0004], "cuda", 2, (2, 2)),  # at most one process per round
        ([0.0004], "cuda", 3, (3, 2)),
        ([0.0004], "cpu", 5, (1, 1)),  # the CPU rehearsal: one of each
    ],
)
def test_several_timing_processes_per_role_only_when_a_speed_case_is_short(floors_ms, device, repeats, expected):
    got = (timing.reference_processes(repeats, device, floors_ms), timing.candidate_processes(repeats, device, floors_ms))
    assert got == expected


def test_the_sm_clock_of_each_round_is_in_the_case_and_in_an_unstable_cases_reason():
    from ferret.gate.sm_clock import RoundClocks

    clocks = RoundClocks(read=lambda: None)
    rounds: list[list[int | None]] = [[1980], [1755, 1980], [1980]]
    for number, readings in enumerate(rounds):
        clocks.add(0, wire.CANDIDATE_TIMER, number, readings)
    mine, theirs = _sides([0.010, 0.013, 0.010], [0.030, 0.030, 0.030])
    result = timing._case_timing(_case(), mine, theirs, 3, [], H200, max_spread=0.10)
    timing._add_clocks(result, clocks, 0)
    assert result.sm_clock_mhz == {"candidate": [[1980, 1980], [1755, 1980], [1980, 1980]]}
    assert result.unstable_reason is not None
    assert result.unstable_reason.endswith("(SM clock by round, MHz: candidate 1980-1980, 1755-1980, 1980-1980)")
    steady_mine, steady_theirs = _sides([0.010, 0.010, 0.010], [0.030, 0.030, 0.030])
    steady = timing._case_timing(_case(), steady_mine, steady_theirs, 3, [], H200, max_spread=0.10)
    timing._add_clocks(steady, clocks, 0)
    assert steady.unstable_reason is None and steady.sm_clock_mhz["candidate"][1] == [1755, 1980]


def test_each_rounds_spin_is_in_the_case_in_the_judges_round_order():
    """Two candidate processes take rounds 0, 2, 4 and 1, 3: the spins they report come back in round order, so a
    round retimed behind a longer spin (after late calls) stands beside its time."""
    first, second = _candidate([0.0055, 0.0055, 0.0055]), _candidate([0.0048, 0.0055])
    first.spin_ms, second.spin_ms = {"candidate": [0.04, 0.041, 0.04]}, {"candidate": [0.16, 0.04]}
    mine = timing.ProcessRounds.of([first, second], 5)
    theirs = timing.ProcessRounds.of([_reference([0.045] * 5)], 5)
    result = timing._case_timing(_case(), mine, theirs, 5, [], H200, max_spread=0.10)
    assert result.spin_ms == {"candidate": [0.04, 0.16, 0.041, 0.04, 0.04]}
    assert result.samples["candidate"][1] == 0.0048


def test_the_candidate_timers_answers_are_read_on_the_host_and_only_inside_its_folder(tmp_path):
    """The candidate's timer names its answers file in its own terms (/home/user/work under an allow-list sandbox);
    the judge reads it in the timer's folder on the host, and a path leading out of that folder is no answer."""
    import json
    from dataclasses import asdict

    from ferret.gate.interleave import TimerProcess
    from ferret.sandbox.view import neutral_view

    def case(name: str, answers: str) -> wire.TimingCaseResult:
        return wire.TimingCaseResult(
            case=name, samples={}, host_ms={}, pool_sets=1, persisting_l2="", flags=[], answers_file=answers
        )

    results = wire.TimingResults(device="cpu", cases=[case("a", "/home/user/work/answers-0.safetensors"), case("b", "/etc/x")])
    (tmp_path / wire.TIMING_RESULT_FILE).write_text(json.dumps(asdict(results)))
    timer = TimerProcess(wire.CANDIDATE_TIMER, tmp_path, [], {}, hide=(), view=neutral_view(tmp_path))
    read = timing._read_results(timer, ["a", "b"])
    assert not isinstance(read, str), read
    assert [c.answers_file for c in read.cases] == [str(tmp_path / "answers-0.safetensors"), None]
