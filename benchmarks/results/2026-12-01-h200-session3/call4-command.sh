#!/usr/bin/env bash
# Session 2026-12-01 (09:41 UTC start) call 4: the MLA candidate found by call 3's search (now committed) compiles
# each kernel once over every GPU case (its GPU test); the timing guards again, after the judge's overlap (7771070).
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
echo "commit $(cat COMMIT)"
s=$(date +%s)
timeout 100 python3 -m pytest -q -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py -p no:cacheprovider -rA > $OUT/pytest-compile-once.log 2>&1; tail -4 $OUT/pytest-compile-once.log
echo "compile-once $(( $(date +%s)-s )) s"; s=$(date +%s)
FERRET_GATES_DIR=/tmp/gates timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider -rA > $OUT/pytest-guards.log 2>&1; tail -8 $OUT/pytest-guards.log
echo "guards $(( $(date +%s)-s )) s"
