# call 3 (session 18, snapshot in COMMIT: kernel 1's append done by kernel 2's rope program with side_kernels=streamed,
# candidates re-rendered): the honest MLA gate at production shapes; the paged candidate's GPU cases; the bench (each
# kernel's device time) of the new default beside the candidate before it (old/triton_mla_4e34f68.py, call 2's)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $OUT/call3-gpu.txt 2>&1
start=$(date +%s)
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention" -rA > $OUT/call3-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call3-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 70 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py -rA > $OUT/call3-paged.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-paged.log
start=$(date +%s)
timeout 80 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 50 --kernels --no-peers --point "" \
  --candidate old/triton_mla_4e34f68.py --shapes full_h128_b1_l4096 full_h128_b8_l4096 full_h128_b64_l4096 > $OUT/call3-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call3-bench.jsonl
grep -h "speed \|geomean\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call3-gate.log $OUT/call3-paged.log | cut -c1-250
grep -h -A12 "Device time per kernel" $OUT/call3-bench.log | cut -c1-330
