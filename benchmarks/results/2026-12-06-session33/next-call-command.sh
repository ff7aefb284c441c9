# PREPARED for the next session (not run): call 1's command. On an H200: session 22's H200 run
# (20261204-144628-8ad09c) resumed: round 3 judges the wgmma, pdl and pdl_all starts and the final check (with
# torch.compile of the baseline) reads the H200 targets (about 400 s with the gate's build). On an H100 it stops.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-560}
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
  exit 0
fi
echo "not an H200: nothing else run in this call (the H100 memory question waits for a call with other H100 work)"
