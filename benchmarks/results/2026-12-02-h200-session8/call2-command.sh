set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call2-gpu.txt 2>&1
python3 benchmarks/timing_repeatability.py run --ops rmsnorm --checks 3 --gates-dir /tmp/gates --out $OUT \
  --budget-s 230 > $OUT/call2-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call2-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call2-checks.jsonl
echo "rmsnorm $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
timeout 240 python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider tests/tasks/mla_attention_paged/ > $OUT/call2-paged-tests.log 2>&1
echo "paged tests $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
