"""scripts/offline_gpu_wheels.sh, which prepares the wheels an offline GPU machine lacks, without a download: it is
valid bash, writes into .whl/ (ignored by git, so the wheels are never committed), and pins FlashMLA's package to one
build, the one benchmarks/results/2026-12-06-h100-mla-flashmla-peer.md ran with."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "offline_gpu_wheels.sh"


def test_the_script_parses_and_downloads_into_an_ignored_folder():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, check=False).returncode == 0
    assert "-d .whl" in SCRIPT.read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", ".whl/x.whl"], cwd=REPO, check=False)
    assert ignored.returncode == 0, ".whl/ is not ignored by git"


def test_flashmla_is_pinned_to_the_build_the_peer_figure_used():
    (pin,) = re.findall(r'"sgl-flash-mla==([0-9.]+)"', SCRIPT.read_text())
    figure = (REPO / "benchmarks" / "results" / "2026-12-06-h100-mla-flashmla-peer.md").read_text()
    assert f"sgl-flash-mla {pin}" in figure
