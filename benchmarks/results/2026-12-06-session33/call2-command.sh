# Call 2 of session 33. On an H200: call 1's H200 branch (session 22's H200 run resumed: round 3 and the final check).
# On an H100: kernel 2 alone in its forms, with the new one-wave form (rope folded into the first column block's
# programs, optional K-blocks), beside cuBLAS's bmm, at 128 heads, B = 64, 128, 8, 1 (benchmarks/q_prepare_probe.py).
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/call1-command.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 480 python3 benchmarks/q_prepare_probe.py --out $OUT --one-wave-form --shapes 64:128,128:128,8:128,1:128 > $OUT/probe.log 2>&1
echo "probe rc=$?"
python3 - "$OUT/q-prepare-probe.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = r.get("impl") or f'{r["form"]} {r.get("variant") or (r.get("block_b"), r.get("block_c"), r.get("num_warps"))}'
    print(r["B"], name, r.get("cold_us"), r.get("ok"), r.get("bitwise"), (r.get("why") or "")[:80])
PY
