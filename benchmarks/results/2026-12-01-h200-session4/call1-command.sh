#!/usr/bin/env bash
# Session 2026-12-01 (12:12 UTC start) call 1: what inside a process sets a small kernel's offset (issue 11 §3);
# the committed MLA candidate's compile-once GPU test (after 5dd6333); three checks (1 cold, 2 warm) of MLA with it (§4).
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
echo "commit $(cat COMMIT)"
s=$(date +%s)
timeout 120 python3 benchmarks/offset_source_probe.py --processes 4 --count 6 --out $OUT > $OUT/offset-probe.log 2>&1; tail -12 $OUT/offset-probe.log
echo "probe $(( $(date +%s)-s )) s"; s=$(date +%s)
timeout 100 python3 -m pytest -q -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py -p no:cacheprovider -rA > $OUT/pytest-compile-once.log 2>&1; tail -4 $OUT/pytest-compile-once.log
echo "compile-once $(( $(date +%s)-s )) s"; s=$(date +%s)
WHL=../.whl OPS="mla_attention" CHECKS=2 BUDGET_S=330 OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -30
echo "checks $(( $(date +%s)-s )) s"
