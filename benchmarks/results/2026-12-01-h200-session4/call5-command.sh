#!/usr/bin/env bash
# Session 2026-12-01 (12:12 UTC start) call 5: the timing guards on the GPU, the count-switching cheats switching
# at their module's call 50 (the candidate timer's 4 copies each count their own calls).
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
echo "commit $(cat COMMIT)"
s=$(date +%s)
FERRET_GATES_DIR=/tmp/gates-guards timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider -rA > $OUT/pytest-guards.log 2>&1; tail -8 $OUT/pytest-guards.log
echo "guards $(( $(date +%s)-s )) s"
