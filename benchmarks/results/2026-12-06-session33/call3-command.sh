# Call 3 of session 33. On an H200: call 1's H200 branch. On an H100: kernel 2's forms timed again, interleaved, five
# rounds (benchmarks/q_prepare_repeat.py), since call 2's single medians moved by up to 7x for the same work.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/call1-command.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/clocks-before.csv 2>&1
timeout 400 python3 benchmarks/q_prepare_repeat.py --out $OUT --rounds 5 > $OUT/repeat.log 2>&1
echo "repeat rc=$?"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/clocks-after.csv 2>&1
python3 - "$OUT/q-prepare-repeat.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["B"], r["name"], r["median_us"], r["min_us"], r["max_us"], r.get("ok"), r.get("bitwise"))
PY
tail -3 $OUT/repeat.log
