# Call 5 of session 35 (any card): call 3's peer table again, with the bench's whole steps now timed by the gate's
# clock (ferret.bench.process.Clock) instead of do_bench, which read the host's launches at small batch.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 190 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 110 --rounds 3 \
  --shapes h128_b1_l4096 h128_b8_l4096 h128_b64_l4096 h128_b128_l4096 full_h16_b64_l16384 \
  --point attention_kernel=wgmma,launch_overlap=pdl_all > $OUT/bench.log 2>&1
echo "bench rc=$?"
grep '^|' $OUT/bench/mla-template-bench.md | cut -c1-40,200-400 | head -20
python3 - "$OUT/bench/mla-template-bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "rounds_us" in r:
        print(r["shape"], r["impl"][:24], r["rounds_us"], r.get("host_launch_us"), r.get("late_fractions"))
PY
