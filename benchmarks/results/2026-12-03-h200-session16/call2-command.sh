# call 2 (session 16, snapshot 06d6e35): the GPU gate checks after tests/conftest.py set OMP_NUM_THREADS=1 (passed to
# the candidates' processes by the sandbox since 2bc19fc): the honest MLA candidate alone, then the honest rmsnorm,
# softmax and rope candidates and the bf16-partials mutant on three workers
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
date -u > $OUT/call2-gpu.txt
start=$(date +%s)
timeout 320 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "mla_attention and honest" -rA > $OUT/call2-gate-mla.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gate-mla.log
start=$(date +%s)
timeout 230 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "(honest and not mla_attention) or bf16_partials" -n 3 -rA > $OUT/call2-gates.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gates.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call2-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "seconds by phase\|speed \|rc=\|passed\|failed" $OUT/call2-gate-mla.log $OUT/call2-gates.log | cut -c1-250
