#!/usr/bin/env bash
# Session 2026-12-01 (12:12 UTC start) call 4: three checks (1 cold, 2 warm) of MLA with the committed candidate
# after the cold gate's cache race fix (issue 11 §4); the timing guards on the GPU after the candidate timer's copies
# and the slots' last-input sweep.
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
echo "commit $(cat COMMIT)"
s=$(date +%s); s0=$s
FERRET_GATES_DIR=/tmp/gates-guards timeout 230 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider -rA > $OUT/pytest-guards.log 2>&1; tail -8 $OUT/pytest-guards.log
echo "guards $(( $(date +%s)-s )) s"; s=$(date +%s)
WHL=../.whl OPS="mla_attention" CHECKS=2 BUDGET_S=$(( 560 - $(date +%s) + s0 )) OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -12
echo "checks $(( $(date +%s)-s )) s"
