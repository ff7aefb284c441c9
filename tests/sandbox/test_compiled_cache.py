"""The candidate's compiled kernels carried from its runner to its timer within one check
(`ferret.sandbox.launch.keep_compiled`, `seed_compiled`): plain files only, never a link, never past a size."""

from __future__ import annotations

from pathlib import Path

from ferret.sandbox import launch


def _runner_cache(workdir: Path) -> Path:
    cache = launch.triton_cache_of(workdir)
    (cache / "ABCD").mkdir(parents=True)
    (cache / "ABCD" / "kernel.cubin").write_bytes(b"\x7fELF kernel")
    (cache / "ABCD" / "kernel.json").write_text('{"name": "kernel"}')
    return cache


def test_the_runners_kernels_reach_its_timer_as_copies(tmp_path):
    runner, kept, timer = tmp_path / "runner", tmp_path / "kept", tmp_path / "timer"
    kept.mkdir()
    _runner_cache(runner)
    launch.keep_compiled(runner, kept)
    launch.seed_compiled(timer, kept)
    copied = launch.triton_cache_of(timer) / "ABCD" / "kernel.cubin"
    assert copied.read_bytes() == b"\x7fELF kernel"
    copied.write_bytes(b"rewritten by the timer")  # the timer's copy is its own: what was kept does not change
    assert (kept / "cache" / "ABCD" / "kernel.cubin").read_bytes() == b"\x7fELF kernel"


def test_a_link_planted_in_the_cache_is_never_followed(tmp_path):
    runner, kept, timer = tmp_path / "runner", tmp_path / "kept", tmp_path / "timer"
    kept.mkdir()
    secret = tmp_path / "gates" / "golden.safetensors"
    secret.parent.mkdir()
    secret.write_text("golden values the candidate must never see")
    cache = _runner_cache(runner)
    (cache / "ABCD" / "golden").symlink_to(secret)
    (cache / "linked_folder").symlink_to(secret.parent, target_is_directory=True)
    launch.keep_compiled(runner, kept)
    launch.seed_compiled(timer, kept)
    seeded = launch.triton_cache_of(timer)
    assert (seeded / "ABCD" / "kernel.json").exists()
    assert not (seeded / "ABCD" / "golden").exists() and not (seeded / "ABCD" / "golden").is_symlink()
    assert not (seeded / "linked_folder").exists()


def test_a_cache_over_the_limit_is_not_carried(tmp_path, monkeypatch):
    runner, kept, timer = tmp_path / "runner", tmp_path / "kept", tmp_path / "timer"
    kept.mkdir()
    _runner_cache(runner)
    monkeypatch.setattr(launch, "CARRIED_CACHE_LIMIT_BYTES", 8)
    launch.keep_compiled(runner, kept)
    launch.seed_compiled(timer, kept)
    assert not (kept / "cache").exists() and not launch.triton_cache_of(timer).exists()


def test_nothing_kept_seeds_nothing(tmp_path):
    launch.seed_compiled(tmp_path / "timer", None)
    launch.seed_compiled(tmp_path / "timer", tmp_path)
    assert not launch.triton_cache_of(tmp_path / "timer").exists()
