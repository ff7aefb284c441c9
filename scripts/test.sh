#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh), hold the style of ferret/, tests/ and benchmarks/ (ruff check, ruff
# format) and the types of ferret/, tasks/ and tests/ (pyright), then run the whole suite with pytest on the CPU, on two workers (pytest-xdist): most tests wait on
# candidate processes. --dist worksteal: a worker that runs out of tests takes queued ones from the other, so that a
# few long tests (60-130 s each) queued late on one worker do not leave the other idle at the end.
# GPU tests are marked `gpu` and skipped without a GPU; on a CUDA machine run `python -m pytest -m gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
echo "== ruff check ferret tests benchmarks" >&2
ruff check ferret tests benchmarks
echo "== ruff format --check ferret tests benchmarks" >&2
ruff format --check ferret tests benchmarks
echo "== pyright (ferret/, tasks/, tests/; settings in pyproject.toml)" >&2
pyright
# Tests marked `slow` (full sizes of tests that also run at a reduced size) are deselected: on 2 cores the whole suite
# runs past its 15-minute budget. A later `-m` replaces this one (`scripts/test.sh -m slow` runs them).
exec python -m pytest -q -n 2 --dist worksteal -m "not slow" "$@"
