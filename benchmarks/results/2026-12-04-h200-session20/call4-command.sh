# call 4 (session 20): the gate at production shapes on the candidate of call 3 (call 3's gate run met its 300 s
# limit: that call's host was slow, its torch.compile timings 1.3-1.8x session 19's), now with 480 s
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uptime; } > $OUT/call4-gpu.txt 2>&1
start=$(date +%s)
timeout 480 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and mla_attention_wgmma" -rA > $OUT/call4-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call4-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "rc=\|passed\|failed\|FAILED" $OUT/call4-gate.log | cut -c1-250 | tail -12
