"""What the judge's environment passes to a candidate's process: the thread limit, never a secret."""

import subprocess
import sys

from ferret.sandbox.launch import candidate_environment


def test_the_thread_limit_reaches_the_candidate_and_secrets_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    env = candidate_environment(tmp_path / "work", interpret=True)
    assert env["OMP_NUM_THREADS"] == "1"
    assert "ANTHROPIC_API_KEY" not in env
    # torch in that environment takes one thread (unset, it takes every core)
    threads = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert threads.stdout.strip() == "1", threads.stderr[-2000:]


def test_without_a_thread_limit_the_candidate_gets_none(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert "OMP_NUM_THREADS" not in candidate_environment(tmp_path / "work", interpret=True)
