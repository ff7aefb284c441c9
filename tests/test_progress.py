"""Progress: the Python API logs it by default, the console shows elapsed time and a heartbeat while a
step runs, a plain function still receives the lines, and a quiet reporter passes steps only."""

from __future__ import annotations

import io
import logging
import re
import time

from ferret.progress import ConsoleReporter, LogReporter, Reporter, as_reporter


def test_nothing_passed_means_the_ferret_logger(caplog):
    reporter = as_reporter(None)
    assert isinstance(reporter, LogReporter)
    with caplog.at_level(logging.INFO, logger="ferret"):
        reporter("gate verified")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [("ferret", logging.INFO, "gate verified")]


def test_a_plain_function_gets_the_lines_and_no_steps():
    lines = []
    reporter = as_reporter(lines.append)
    reporter("one")
    reporter.step("candidate", 1, 3, "typical@bfloat16")
    reporter.say("two")
    assert lines == ["one", "two"]


def test_quiet_passes_steps_and_drops_lines():
    seen = []

    class Recorder(Reporter):
        def say(self, message):
            seen.append(("say", message))

        def step(self, task, done, total, label=""):
            seen.append(("step", task, done, total, label))

    quiet = Recorder().quiet()
    quiet("a line")
    quiet.step("candidate", 2, 5, "odd_width@float16")
    assert seen == [("step", "candidate", 2, 5, "odd_width@float16")]


def test_console_lines_carry_the_elapsed_time():
    stream = io.StringIO()
    reporter = ConsoleReporter(stream=stream, live=False)
    reporter("a long line " + "x" * 200)
    reporter.close()
    line = stream.getvalue()
    assert re.match(r"ferret \[ +\d+\.\ds\] a long line x{200}\n$", line), line  # one line, never wrapped


def test_a_heartbeat_says_what_is_still_running_when_nothing_else_is_printed():
    stream = io.StringIO()
    reporter = ConsoleReporter(stream=stream, heartbeat_s=0.3, live=False)
    reporter.step("candidate", 3, 15, "typical@float32")
    time.sleep(1.5)
    reporter.step("candidate", 15, 15, "done")
    time.sleep(0.8)
    reporter.close()
    beats = [line for line in stream.getvalue().splitlines() if "still working" in line]
    assert beats, stream.getvalue()
    assert re.search(r"still working: candidate 4/15 typical@float32 \(\d+s on it\)", beats[0]), beats[0]
    count = len(beats)
    time.sleep(0.8)
    assert len([line for line in stream.getvalue().splitlines() if "still working" in line]) == count, "no beat once done"


def test_the_live_bar_runs_on_a_terminal_and_stops_on_close():
    stream = io.StringIO()
    reporter = ConsoleReporter(stream=stream, live=True)
    reporter.step("candidate", 0, 2, "typical@bfloat16")
    assert reporter._bar is not None and reporter._bar.live.is_started
    reporter("a line above the bar")
    reporter.step("candidate", 2, 2, "done")
    reporter.close()
    assert reporter._bar is None
    assert "a line above the bar" in stream.getvalue()
