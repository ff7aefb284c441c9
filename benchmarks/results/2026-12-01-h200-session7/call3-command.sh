set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call3-gpu.txt 2>&1
python3 benchmarks/timing_repeatability.py run --ops rope rmsnorm softmax --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s 555 > $OUT/call3-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call3-repeat-table.md 2>&1
echo "total $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
