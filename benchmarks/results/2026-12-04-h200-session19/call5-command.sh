# call 5 (session 19, the working tree of the commit named in the results README): kernel 3 on warpgroup MMA inside the
# candidate (tasks/mla_attention/candidates/wgmma_mla.py): its GPU tests, the gate at production shapes, the probe's
# checks and kernel timings beside Triton's kernel 3, then the template bench with FlashMLA beside both candidates
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call5-gpu.txt 2>&1
start=$(date +%s)
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py tests/backends -rA > $OUT/call5-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-kernel-tests.log
start=$(date +%s)
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention_wgmma" -rA > $OUT/call5-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call5-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 70 python3 -W ignore benchmarks/mla_wgmma_probe.py --out /tmp/probe > $OUT/call5-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-probe.log
cp /tmp/probe/wgmma-probe.jsonl $OUT/call5-probe.jsonl
grep -h "rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call5-kernel-tests.log $OUT/call5-gate.log | cut -c1-250
tail -12 $OUT/call5-probe.log
