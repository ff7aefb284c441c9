set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call4-gpu.txt 2>&1
python3 benchmarks/timing_repeatability.py run --ops rmsnorm rope --checks 3 --gates-dir /tmp/gates --out $OUT \
  --budget-s 440 > $OUT/call4-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call4-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call4-checks.jsonl
echo "checks $(( $(date +%s) - start ))s" >> $OUT/call4-elapsed.txt
timeout $(( 560 - ($(date +%s) - start) )) python3 -m pytest -m gpu -v -rA -p no:cacheprovider tests/gpu/test_cuda_candidates_gpu.py -k "reads_the_clock" > $OUT/call4-clock-cheat.log 2>&1
echo "clock cheat test $(( $(date +%s) - start ))s" >> $OUT/call4-elapsed.txt
