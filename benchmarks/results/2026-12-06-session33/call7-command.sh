# Call 7 of session 33 (the last device time, about 460 s). On an H200: call 1's H200 branch cut at 400 s (round 3 of
# session 22's H200 run; the final check may be cut, leaving the run resumable). On an H100: session 32's prepared
# timed check of the committed candidate with each process's GPU memory sampled every second (its H100 branch).
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-400}
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
( while sleep 1; do echo "$(date +%s) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"; done ) > $OUT/gpu-memory.log 2>&1 &
sampler=$!
timeout ${CHECK_TIMEOUT_S:-340} python3 -m ferret.cli.main check contracts/mla_attention.yaml tasks/mla_attention/candidates/wgmma_mla.py \
  --profile gpu --gates-dir /tmp/gates --verdict-out $OUT/verdict.json > $OUT/check.log 2>&1
echo "check rc=$?" >> $OUT/check.log
kill $sampler
grep -E "speed |PASS|FAIL|seconds by phase|rc=" $OUT/check.log | cut -c1-300 | tail -12
python3 - "$OUT/gpu-memory.log" <<'PY'
import re, sys
peak = {}
for line in open(sys.argv[1]):
    for pid, mib in re.findall(r"(\d+), (\d+) MiB", line):
        peak[pid] = max(peak.get(pid, 0), int(mib))
print("peak MiB by pid:", dict(sorted(peak.items(), key=lambda kv: -kv[1])))
PY
