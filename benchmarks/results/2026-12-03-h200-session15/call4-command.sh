# call 4 (session 15, snapshot 67af396): the honest MLA candidate at HEAD through the gate at production shapes, alone
# (call 3's three workers ran out of their 400 s before its check ended)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates4 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 290 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "mla_attention and honest" -rA > $OUT/call4-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-gate.log
for f in /tmp/gates4/*/report.json; do cp "$f" "$OUT/call4-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "seconds by phase\|speed \|rc=\|passed\|failed" $OUT/call4-gate.log | cut -c1-300
