# NOT RUN: one more start failed after call 1, then the tool refused a start (too little device time left).
# call 3 (session 30), with the device time left after call 1 (409 s, then 319 after one more failed start): kernel 2 alone at B = 64 and 128 (128 heads),
# benchmarks/q_prepare_probe.py: both template forms (streamed: the rope in programs of its own; batch_blocks: the
# rope in the first column block's programs) in launch variants, the per-head form, cuBLAS's bmm and a copy of the
# same bytes, cold medians, cut at 100 s. Needs .whl/, carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call3-gpu.txt 2>&1
cat $OUT/call3-gpu.txt
timeout 100 python3 -W ignore benchmarks/q_prepare_probe.py --out /tmp/qp --shapes 64:128,128:128 --heads-form \
  > $OUT/call3-q-prepare-probe.log 2>&1
echo "q_prepare probe rc=$?" >> $OUT/call3-q-prepare-probe.log
cp /tmp/qp/q-prepare-probe.jsonl $OUT/call3-q-prepare-probe.jsonl
python3 - <<'PY'
import json
for line in open("/tmp/qp/q-prepare-probe.jsonl"):
    r = json.loads(line)
    print(r.get("B"), r.get("form") or r.get("impl"), r.get("block_b"), r.get("block_c"), r.get("num_warps"),
          r.get("num_stages"), r.get("ok"), r.get("cold_us"))
PY
