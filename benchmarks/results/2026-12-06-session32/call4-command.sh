# Session 32, call 4 (an H100): the judge's comparisons in chunks (ferret/gate/metrics.py, COMPARE_CHUNK) on the GPU.
# First the metrics' GPU test (the same metrics on the GPU as on the CPU), then `ferret check` of the committed wgmma
# candidate at production shapes without timing (--no-speed), nvidia-smi sampling each process's GPU memory every
# second: before the change the check's own process peaked at 51.3 GiB (call 2). Needs .whl/, carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call4-gpu.txt 2>&1
cat $OUT/call4-gpu.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gate/test_metrics.py -rA 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -3
( while sleep 1; do echo "$(date +%s) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"; done ) > $OUT/call4-gpu-memory.log 2>&1 &
sampler=$!
start=$(date +%s)
timeout ${CHECK_TIMEOUT_S:-300} python3 -m ferret.cli.main check contracts/mla_attention.yaml tasks/mla_attention/candidates/wgmma_mla.py \
  --profile gpu --no-speed --gates-dir /tmp/gates --verdict-out $OUT/call4-verdict.json > $OUT/call4-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-check.log
kill $sampler
grep -E "PASS|FAIL|seconds by phase|rc=|locked" $OUT/call4-check.log | cut -c1-400 | tail -5
# the largest sample of each process (MiB)
python3 - "$OUT/call4-gpu-memory.log" <<'PY'
import re, sys
peak = {}
for line in open(sys.argv[1]):
    for pid, mib in re.findall(r"(\d+), (\d+) MiB", line):
        peak[pid] = max(peak.get(pid, 0), int(mib))
print("peak MiB by pid:", dict(sorted(peak.items(), key=lambda kv: -kv[1])))
PY
