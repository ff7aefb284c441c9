"""The report as a person sees it: the HTML page of a gate and of a run loaded from file:// in headless
Chromium (the system's `chromium`, driven by the `playwright` package; the opt-in scripts/install_browser.sh
installs it, and without it these tests skip, saying so), asserting on the page's rendered, visible text, and
that no request left the page: every request is routed through the test, which lets only the page's own
file through.

Candidate text in the fixtures holds an <img> and a <script> fetching http://evil.example/: were either
parsed as markup, its request would be recorded here."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_fixtures import EVIL, make_gate, make_run  # noqa: E402

from ferret.reporting import write_report  # noqa: E402

NO_BROWSER = "no Chromium on this machine (`chromium` on the PATH): `sudo bash scripts/install_browser.sh` installs it"


def find_chromium() -> Path | None:
    """The system's Chromium: `chromium` (Debian's name) or `chromium-browser` on the PATH, else None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


@pytest.fixture(scope="module")
def browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(NO_BROWSER)
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package (the dev extra) is missing")
    # Chromium refuses to run as root with its sandbox on (CI runs the tests as root); the page is our own.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=args, headless=True)
        yield browser
        browser.close()


def _visible_text(browser, page_file: Path) -> tuple[str, list[str], Any]:
    """(the body's rendered text, every request the page made, the page) for the page at `page_file`."""
    page_url = page_file.as_uri()
    requests: list[str] = []
    context = browser.new_context(java_script_enabled=True)

    # Every request the page makes is recorded (the request event fires for an aborted one too); the
    # route lets only the page's own file through, so nothing would leave even if something tried.
    context.on("request", lambda request: requests.append(request.url))
    context.route("**/*", lambda route: route.continue_() if route.request.url == page_url else route.abort())
    page = context.new_page()
    page.goto(page_url, wait_until="load")
    page.wait_for_timeout(200)  # time for anything deferred to try a request
    return page.inner_text("body"), requests, page


def test_the_run_page_shows_rounds_verdicts_reviews_timing_and_the_winner(browser, tmp_path):
    gates = tmp_path / "gates"
    make_gate(gates)
    page_file = write_report(make_run(tmp_path / "runs"), gates_dir=gates).html
    text, requests, page = _visible_text(browser, page_file)
    assert requests == [page_file.as_uri()], f"requests left the page: {requests}"
    assert "Status: accepted" in text
    assert "Winner: round 1, candidate 0 (one row per program), round-01/candidate-0.py, speedup 3.04x." in text
    assert "Final acceptance check (fresh process, fresh cases): PASS" in text
    assert "Verdict: FAIL — first failing stage: y" in text
    assert "Verdict: PASS — first failing stage: none" in text
    assert "library_call" in text and "math_mismatch" in text
    assert EVIL in text  # candidate text shown as the text it is, not run or loaded
    assert "Integrity fail, plan pass, by llm:scripted" in text
    assert "Just call the library" in text and "Amortize the weight load." in text
    assert "the optimizer was asked to pivot" in text
    # Timing: eager, torch.compile, the floor and the fraction of the floor, in the table and the plots.
    assert "candidate ms\teager ms\ttorch.compile ms" in text
    assert "hidden_7168\t0.0312\t0.095\t0.041\t3.04x\t1.31\t0.0187\t0.599\tyes" in text
    # Serving timing: graph replay and eager wall time per call, the host share, why an implementation did not capture
    assert "The target compares graph replay." in text
    assert "hidden_7168\tgraph replay\t3.04x\t0.03\t0.0912\t0.042\t0.141\t0.286\t0.394\t6\tbaseline_compiled: host_read" in text
    samples = "svg[aria-label='timing samples of case hidden_7168']"
    assert page.locator(samples).count() == 3  # the two timed candidates and the final check
    assert page.locator(f"{samples} >> nth=0 >> circle").count() == 9  # 3 rounds of 3 implementations
    assert page.locator("svg[aria-label='fraction of the floor per case']").count() == 3
    # The winner's frame, and the stage chart's failing dot (red) on the rejected candidate.
    assert page.locator(".candidate.winner").count() == 1
    assert page.locator("svg[aria-label^='error of each stage'] circle[fill='#cf222e']").count() == 1


def test_the_gate_page_shows_each_verdict_its_parts_and_failing_stage(browser, tmp_path):
    page_file = write_report(make_gate(tmp_path / "gates")).html
    text, requests, page = _visible_text(browser, page_file)
    assert requests == [page_file.as_uri()], f"requests left the page: {requests}"
    assert "op\trmsnorm" in text and "profile\tgpu" in text
    assert "1\truns/r1/round-01/candidate-1.py\tFAIL\ty\tmath_mismatch, library_call\t-\t-" in text
    assert "0\truns/r1/round-01/candidate-0.py\tPASS\t-\t-\t3.04\thidden_7168 0.599" in text
    assert "correctness\tfail\tcorrectness fail" in text and "batch_invariance\tskipped" in text
    # The failing stage against its tolerance, shown without opening anything.
    assert "typical@bfloat16\ty\tfail\t0.3\t0.01\t0.45\t0.02" in text
    assert "Speed not measured: the candidate is not correct." in text
    assert "torch.nn.functional.rms_norm called: " + EVIL in text
    # Every stage is one click away, not on the page a reader first sees.
    assert "Every stage of every variant (4)" in text and "typical@float32\tinv_rms" not in text
    page.locator("summary").first.click()
    assert "typical@float32\tinv_rms\tpass" in page.inner_text("body")


@pytest.mark.parametrize("name", ["chromium", "chromium-browser"])
def test_the_browser_is_found_by_either_name_on_the_path(tmp_path, monkeypatch, name):
    (tmp_path / name).write_text("#!/bin/sh\n")
    (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium() == tmp_path / name
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert find_chromium() is None
