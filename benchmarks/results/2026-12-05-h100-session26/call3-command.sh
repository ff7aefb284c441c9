# NOT RUN: no machine came for this call in session 26 (README.md); kept to be run by a later session
# call 3 (session 26): kernel 2 (q_nope @ W_UK and the rope of q_pe) alone at B=1 and B=8, 128 heads, in its launch
# variants, the per-head form and the GEMV form, beside cuBLAS's bmm and a copy of the same bytes (benchmarks/q_prepare_probe.py):
# at B=1 it took 10.5 us of the step (H100, call 1), twice what its 16.8 MB of W_UK take at the H100's bandwidth
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call3-gpu.txt 2>&1
start=$(date +%s)
timeout 200 python3 -W ignore benchmarks/q_prepare_probe.py --out /tmp/qp --shapes 1:128,8:128 --heads-form --gemv-form > $OUT/call3-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-probe.log
cp /tmp/qp/q-prepare-probe.jsonl $OUT/call3-q-prepare-probe.jsonl 2>/dev/null
python3 - <<'PY'
import json
for line in open('/tmp/qp/q-prepare-probe.jsonl'):
    r = json.loads(line)
    print(r.get('B'), r.get('form', r.get('impl')), r.get('block_b'), r.get('block_c'), r.get('num_warps'), r.get('num_stages'), r.get('cold_us'), r.get('ok'))
PY
