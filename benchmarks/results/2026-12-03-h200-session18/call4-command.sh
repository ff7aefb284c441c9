# call 4 (session 18, snapshot in COMMIT: kernel 1's append shared by the rope programs of kernel 2, 16 rows a head,
# candidates re-rendered): the honest MLA gate at production shapes; the paged candidate's GPU cases; the bench (each
# kernel's device time) of the new default beside the candidate before it (old/triton_mla_4e34f68.py, call 2's),
# the bench first (the budget left may stop the call before its end)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $OUT/call4-gpu.txt 2>&1
start=$(date +%s)
timeout 60 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 35 --kernels --no-peers --point "" \
  --candidate old/triton_mla_4e34f68.py --shapes full_h128_b64_l4096 tp8_b32_l8192 full_h128_b8_l4096 > $OUT/call4-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call4-bench.jsonl
start=$(date +%s)
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention" -rA > $OUT/call4-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call4-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 50 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py -rA > $OUT/call4-paged.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-paged.log
grep -h "speed \|geomean\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call4-gate.log $OUT/call4-paged.log | cut -c1-250
grep -h -A12 "Device time per kernel" $OUT/call4-bench.log | cut -c1-330
