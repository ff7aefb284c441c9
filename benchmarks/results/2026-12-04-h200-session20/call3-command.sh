# call 3 (session 20): kernel 3 chunk by chunk, and its own o_latent at one split, inside the candidate
# (tasks/mla_attention/candidates/wgmma_mla.py): its GPU tests, the gate at production shapes, then the template bench
# (each kernel's device time, FlashMLA beside the wgmma candidate, every output checked first)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call3-gpu.txt 2>&1
start=$(date +%s)
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py tests/backends -rA > $OUT/call3-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-kernel-tests.log
start=$(date +%s)
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention_wgmma" -rA > $OUT/call3-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call3-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 170 python3 -W ignore benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 150 --kernels --point "" \
  --candidate tasks/mla_attention/candidates/wgmma_mla.py \
  --shapes full_h128_b64_l4096 full_h128_b128_l4096 full_h128_b8_l4096 full_h128_b1_l4096 tp1_b64_l4096 > $OUT/call3-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call3-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call3-bench.md
grep -h "rc=\|passed\|failed\|FAILED" $OUT/call3-kernel-tests.log $OUT/call3-gate.log | cut -c1-250 | tail -12
grep -h "bench rc" $OUT/call3-bench.log
cut -c1-300 $OUT/call3-bench.md | tail -45
