# call 3 (session 17, snapshot 956a87b: c092b86 and this file): the honest MLA and rope gates with the ATen watch that no longer imports
# torch._dynamo itself (call 2 ran the timing guards, rmsnorm and softmax, and ended before rope)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/call3-gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call3-gpu.txt
start=$(date +%s)
timeout 540 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest and (mla_attention or rope)" -rA > $OUT/call3-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call3-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "geomean\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call3-gate.log | cut -c1-250
