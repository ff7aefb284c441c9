# call 1 (session 16, snapshot a792cd4): the honest MLA candidate at HEAD through the gate at production shapes, alone on
# a fresh machine (session 15's calls 3-4 did not finish it); then each kernel's device time at small batch for the
# default point and min_tokens_per_split=128 (the committed merge: session 15 tried 128 only with merges since reverted)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/call1-gpu.txt 2>&1
start=$(date +%s)
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "mla_attention and honest" -rA > $OUT/call1-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call1-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 200 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 130 --kernels --point "" --point min_tokens_per_split=128 \
  --shapes full_h128_b1_l4096 full_h128_b8_l4096 tp1_b8_l4096 full_h128_b64_l4096 > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call1-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call1-bench.md
grep -h "seconds by phase\|speed \|rc=\|passed\|failed" $OUT/call1-gate.log | cut -c1-300
grep -A12 "Device time per kernel" $OUT/call1-bench.log | grep -v "torch.compile" | cut -c1-300 | head -12
