#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh), then run the whole suite with pytest on the CPU, on two
# workers (pytest-xdist): most tests wait on candidate processes.
# GPU tests are marked `gpu` and skipped without a GPU; on the H200 run `python -m pytest -m gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
exec python -m pytest -q -n 2 "$@"
