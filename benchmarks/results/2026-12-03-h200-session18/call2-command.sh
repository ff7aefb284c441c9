# call 2 (session 18, snapshot in COMMIT: the row merge in the template, candidates re-rendered): the honest MLA gate at
# production shapes; the paged candidate's GPU cases; then the bench (each kernel's device time) of the default beside
# two kernel-3 sizings at the small-batch speed cases
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $OUT/call2-gpu.txt 2>&1
start=$(date +%s)
timeout 380 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention" -rA > $OUT/call2-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call2-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py -rA > $OUT/call2-paged.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-paged.log
start=$(date +%s)
timeout 120 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 80 --kernels --no-peers --point "" \
  --point min_tokens_per_split=128 --point split_chunk=per_request,min_tokens_per_split=128 \
  --shapes full_h128_b1_l4096 tp8_b32_l8192 full_h128_b8_l4096 tp1_b8_l4096 > $OUT/call2-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call2-bench.jsonl
grep -h "geomean\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call2-gate.log $OUT/call2-paged.log | cut -c1-250
grep -h -A30 "Device time per kernel" $OUT/call2-bench.log | cut -c1-330
