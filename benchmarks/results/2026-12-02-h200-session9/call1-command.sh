set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call1-gpu.txt 2>&1
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version)" > $OUT/call1-versions.txt 2>&1
timeout 60 python3 -m pytest -m gpu -v -rA -p no:cacheprovider tests/gate/test_metrics.py > $OUT/call1-metrics.log 2>&1
echo "metrics $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
python3 benchmarks/timing_repeatability.py run --ops mla_attention softmax --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s 460 > $OUT/call1-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call1-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call1-checks.jsonl
echo "checks $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
timeout $(( 585 - ($(date +%s) - start) )) python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider tests/gpu/test_gpu_timing_guards.py -k "test_honest_candidate_is_timed_without_a_flag" > $OUT/call1-guards-honest.log 2>&1
echo "honest guard $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
