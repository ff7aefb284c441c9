set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call1-gpu.txt 2>&1
F=tests/gpu/test_cuda_candidates_gpu.py
timeout 120 python3 -m pytest -m gpu -v --durations=0 -p no:cacheprovider "$F" -k "clock or ticket" > $OUT/call1-tests.log 2>&1
echo "cuda tests rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
timeout 240 python3 -m pytest -m gpu -v --durations=0 -p no:cacheprovider tests/gpu/test_gpu_timing_guards.py > $OUT/call1-guards.log 2>&1
echo "guards rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
left=$(( 545 - ($(date +%s) - start) ))
python3 benchmarks/timing_repeatability.py run --ops mla_attention --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s $left > $OUT/call1-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call1-repeat-table.md 2>&1
echo "total $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
