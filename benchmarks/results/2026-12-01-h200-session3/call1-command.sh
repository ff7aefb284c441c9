#!/usr/bin/env bash
# Session 2026-12-01 (09:41 UTC start) call 1: the paged candidate's compile-once GPU test (never run on a GPU),
# the process-offset probe of rope decode in 4 fresh processes (its new measures), the timing guards.
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
git_commit=$(cat COMMIT 2>/dev/null); echo "commit $git_commit"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem,temperature.gpu,temperature.memory,pstate --format=csv > $OUT/gpu.txt
python3 -c "import torch,triton,sys;print(torch.__version__,triton.__version__,sys.version.split()[0])" >> $OUT/gpu.txt
s=$(date +%s)
timeout 120 python3 -m pytest -q -m gpu tests/tasks/mla_attention_paged/test_paged_compile_once_gpu.py -p no:cacheprovider -rA > $OUT/pytest-paged-compile-once.log 2>&1; tail -3 $OUT/pytest-paged-compile-once.log
echo "compile-once $(( $(date +%s)-s )) s"; s=$(date +%s)
timeout 200 python3 benchmarks/process_offset_probe.py --op rope --case decode_q_64x128 --processes 4 --out $OUT > $OUT/process-offset-probe.log 2>&1; grep -v '^  ' $OUT/process-offset-probe.log | tail -14
echo "probe $(( $(date +%s)-s )) s"; s=$(date +%s)
FERRET_GATES_DIR=/tmp/gates timeout 250 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider -rA > $OUT/pytest-guards.log 2>&1; tail -5 $OUT/pytest-guards.log
echo "guards $(( $(date +%s)-s )) s"
