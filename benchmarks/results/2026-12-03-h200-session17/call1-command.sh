# call 1 (session 17, snapshot 6bff610): the bf16-partials MLA mutant alone through the gate at production shapes
# (session 16's calls 2 and 4 ended before its check did)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/call1-gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call1-gpu.txt
start=$(date +%s)
timeout 540 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "bf16_partials" -rA > $OUT/call1-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call1-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "seconds by phase\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call1-gate.log | cut -c1-250
