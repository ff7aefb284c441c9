"""Reference timers warm up one at a time (ferret/bench/warmup_turn.py): a second taker waits for the holder to give
the turn back, or to end however it ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from ferret.bench.warmup_turn import WarmUpTurn

HOLD = """
import sys, time
from pathlib import Path
from ferret.bench.warmup_turn import WarmUpTurn
turn = WarmUpTurn(Path(sys.argv[1]))
turn.take()
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
turn.give_back()
time.sleep(float(sys.argv[3]))
"""


def _holder(folder: Path, hold_s: float, linger_s: float = 0.0) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(hold_s), str(linger_s)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def test_a_second_process_waits_until_the_holder_gives_the_turn_back(tmp_path):
    holder = _holder(tmp_path, hold_s=1.5, linger_s=5.0)
    try:
        started = time.monotonic()
        turn = WarmUpTurn(tmp_path)
        turn.take()
        waited = time.monotonic() - started
        assert holder.poll() is None, "the holder gave the turn back before it ended: the wait was for the turn"
        assert waited >= 1.0, f"took the turn after {waited:.2f} s while another process held it for 1.5 s"
        turn.give_back()
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_that_is_killed_while_warming_up_holds_no_one_up(tmp_path):
    holder = _holder(tmp_path, hold_s=60.0)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    turn = WarmUpTurn(tmp_path)
    turn.take()
    assert time.monotonic() - started < 5.0
    turn.give_back()


def test_without_a_compile_cache_the_turn_is_always_free(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    turn = WarmUpTurn.for_compile_cache("rope")
    assert turn.path is None
    turn.take()
    turn.give_back()


def test_once_a_key_is_warmed_up_later_processes_warm_it_up_at_once_beside_each_other(tmp_path):
    first = WarmUpTurn(tmp_path, "rope")
    first.take()
    first.warmed_up()
    assert (tmp_path / "warmed-rope").exists()
    holder = _holder(tmp_path, hold_s=30.0)  # another key's warm-up holds the turn
    try:
        started = time.monotonic()
        again = WarmUpTurn(tmp_path, "rope")
        again.take()
        assert time.monotonic() - started < 1.0, "a warmed-up key waited for another key's turn"
        other = WarmUpTurn(tmp_path, "rmsnorm")
        assert not other._warmed_before()
    finally:
        holder.kill()
        holder.wait()


def test_a_process_that_gives_the_turn_back_without_warming_up_leaves_no_mark(tmp_path):
    turn = WarmUpTurn(tmp_path, "mla")
    turn.take()
    turn.give_back()
    assert not (tmp_path / "warmed-mla").exists()
    waiter = WarmUpTurn(tmp_path, "mla")
    waiter.take()
    assert waiter._fd is not None, "with no mark the next process warms up in its turn"
    waiter.give_back()


def test_the_key_follows_the_baselines_files_and_the_description(tmp_path):
    from ferret.bench.warmup_turn import warm_up_key

    source = tmp_path / "baseline.py"
    source.write_text("def run(): pass\n")
    key = warm_up_key([source], "cases")
    assert warm_up_key([source], "cases") == key
    assert warm_up_key([source], "other cases") != key
    source.write_text("def run(): return 1\n")
    assert warm_up_key([source], "cases") != key
