# call 4 (session 16, snapshot 3edb4a8): the bf16-partials MLA mutant alone through the gate at production shapes (its
# check did not end within call 2's limit)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 270 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "bf16_partials" -rA > $OUT/call4-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call4-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "seconds by phase\|rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call4-gate.log | cut -c1-250
