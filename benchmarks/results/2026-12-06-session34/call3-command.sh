# Call 3 of session 34. On an H200 first: session 22's H200 run (20261204-144628-8ad09c) resumed (round 3 and the final
# check), then the CUDA cheat tests below. On any other card: the CUDA candidates' GPU tests that calls 1 and 2 did not
# reach (the clock, ticket and CuPy stream / array cheats), then call 7 of session 33 again after the timed answers'
# check frees each set's reference run before the next (this session): `ferret check` of the committed candidate
# with timing and torch.compile, each process's GPU memory sampled every second by nvidia-smi (the gate is built first
# on a fresh machine, in its own process, before the sampler starts).
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
if [ $h200 = 1 ]; then
  export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-420}
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" >> $OUT/gpu.txt 2>&1
t=test_cuda_candidates_gpu
timeout ${LIMIT_S:-150} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/$t.py -k "clock or ticket or cupy" -rA --durations=0 -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/$t.log 2>&1
echo "pytest rc=$?" >> $OUT/$t.log
echo "== $t: $(grep -c 'ExternalStream is deprecated' $OUT/$t.log) lines naming ExternalStream's deprecation"
grep -E "FAILED|ERROR|passed|failed|rc=|s call" $OUT/$t.log | tail -12 | cut -c1-240
[ $h200 = 1 ] && exit 0
timeout 200 python3 -m ferret.cli.main gate build contracts/mla_attention.yaml --profile gpu --gates-dir /tmp/gates > $OUT/gate-build.log 2>&1
echo "gate build rc=$?" >> $OUT/gate-build.log; tail -2 $OUT/gate-build.log
( while sleep 1; do echo "$(date +%s) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"; done ) > $OUT/gpu-memory.log 2>&1 &
sampler=$!
timeout ${CHECK_TIMEOUT_S:-400} python3 -m ferret.cli.main check contracts/mla_attention.yaml tasks/mla_attention/candidates/wgmma_mla.py \
  --profile gpu --gates-dir /tmp/gates --verdict-out $OUT/verdict.json > $OUT/check.log 2>&1
echo "check rc=$?" >> $OUT/check.log
kill $sampler
grep -E "speed |PASS|FAIL|seconds by phase|rc=|locked|gate" $OUT/check.log | cut -c1-300 | tail -14
python3 - "$OUT/gpu-memory.log" "$OUT/verdict.json" <<'PY'
import json, re, sys
peak, first = {}, {}
for line in open(sys.argv[1]):
    for pid, mib in re.findall(r"(\d+), (\d+) MiB", line):
        first.setdefault(pid, line.split()[0])
        peak[pid] = max(peak.get(pid, 0), int(mib))
print("peak MiB by pid (first seen, unix s):", {p: (m, first[p]) for p, m in sorted(peak.items(), key=lambda kv: -kv[1])})
try:
    phases = json.load(open(sys.argv[2])).get("phases", [])
    print("phases:", [(p["name"], p["seconds"]) for p in phases])
except Exception as err:
    print("no verdict phases:", err)
PY
