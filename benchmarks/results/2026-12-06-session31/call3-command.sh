# RUN in session 31 through call1-command.sh with FRESH=0 (an H100, 05:00 UTC).
# call 3 (session 31), with the device time the loop leaves: kernel 2 alone (benchmarks/q_prepare_probe.py) at 128 heads,
# B = 64, 128 and 8: both template forms in launch variants, the TMA form (descriptor loads and stores, column blocks
# pipelined; new this session), cuBLAS's bmm and a copy of the same bytes, cold medians, cut at 150 s. The per-head
# form is left out: it lost on the H200 (benchmarks/results/2026-12-04-h200-session20, call 2). Needs .whl/, carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call3-gpu.txt 2>&1
cat $OUT/call3-gpu.txt
timeout 150 python3 -W ignore benchmarks/q_prepare_probe.py --out /tmp/qp --shapes 64:128,128:128,8:128 --tma-form \
  > $OUT/call3-q-prepare-probe.log 2>&1
echo "q_prepare probe rc=$?" >> $OUT/call3-q-prepare-probe.log
cp /tmp/qp/q-prepare-probe.jsonl $OUT/call3-q-prepare-probe.jsonl
tail -3 $OUT/call3-q-prepare-probe.log | cut -c1-300
python3 - <<'PY'
import json
for line in open("/tmp/qp/q-prepare-probe.jsonl"):
    r = json.loads(line)
    print(r.get("B"), r.get("form") or r.get("impl"), r.get("variant") or (r.get("block_b"), r.get("block_c"), r.get("num_warps")),
          r.get("ok"), r.get("cold_us"), (r.get("why") or "")[:120])
PY
