"""benchmarks/mla_step_graph_probe.py's candidate files without a GPU (its timing needs one: CUDA graphs): a --file
names a label, a path and module constants to set, and a constant the module does not have stops the probe rather
than timing the file's default under a variant's name."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CANDIDATE = REPO / "tasks" / "mla_attention" / "candidates" / "wgmma_mla.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("mla_step_graph_probe", REPO / "benchmarks" / "mla_step_graph_probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_file_names_its_label_path_and_constants(probe):
    assert probe.parse_file(f"split-1={CANDIDATE},WGMMA_MIN_SPLIT_TILES=1,ROW_MERGE_SPLITS=16") == (
        "split-1", CANDIDATE, {"WGMMA_MIN_SPLIT_TILES": 1, "ROW_MERGE_SPLITS": 16})
    assert probe.parse_file(f"as-committed={CANDIDATE}") == ("as-committed", CANDIDATE, {})


@pytest.mark.parametrize("text", ["no-path=", f"={CANDIDATE}", f"x={CANDIDATE},WGMMA_MIN_SPLIT_TILES=one",
                                  f"x={CANDIDATE},1X=2"])
def test_a_malformed_file_is_refused(probe, text):
    with pytest.raises(argparse.ArgumentTypeError):
        probe.parse_file(text)


def test_the_constants_are_set_on_the_loaded_module_and_a_missing_one_stops(probe):
    bench = probe.bench_module()
    module = probe.load_point(bench, CANDIDATE, {"WGMMA_MIN_SPLIT_TILES": 1})
    assert module.WGMMA_MIN_SPLIT_TILES == 1
    assert probe.load_point(bench, CANDIDATE, {}).WGMMA_MIN_SPLIT_TILES == 2  # a fresh module: the file's own value
    with pytest.raises(SystemExit, match="WGMMA_MIN_SPLIT_TILE "):
        probe.load_point(bench, CANDIDATE, {"WGMMA_MIN_SPLIT_TILE": 1})
