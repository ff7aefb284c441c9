# PREPARED for the next session (not run). On an H100: this session's H100 run (call 1, run 20261206-051045-d59944,
# cut at 470 s while round 3 judged its third candidate) resumed; on an H200: session 22's H200 run
# (20261204-144628-8ad09c) resumed. A resume refuses another card (a run's times are one device's). Either way round 3
# is judged whole: the wgmma, wgmma + pdl and wgmma + pdl_all starts (their order from either log: tests/tasks/mla_attention/
# test_prepared_resumes.py), about 55 s each on the H100 here, then the run's final
# acceptance check of its best: about 300 s with the gate's lock (75 s here). If pdl or pdl_all is the run's best,
# commit its render as tasks/mla_attention/candidates/wgmma_mla.py with the run log and report (tests keep the
# committed candidate a render of the template). Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-540}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H100 $OUT/gpu.txt; then
  export RESUME_TAR=benchmarks/results/2026-12-06-session31/call1-runs.tar.gz RESUME_RUN=20261206-051045-d59944
elif grep -q H200 $OUT/gpu.txt; then
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
else
  echo "neither an H100 nor an H200: no run of this device to resume"; exit 0
fi
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
