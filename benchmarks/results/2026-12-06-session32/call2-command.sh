# Session 32, call 2 (an H100 needed: the run is an H100's): run 20261206-051045-d59944 (session 31's fresh H100 run,
# whose round 3 call 1 finished) resumed after the judge's out-of-memory fix. Its 3 rounds are done, so resuming it
# runs only the final acceptance check of its best (round 3's candidate 3, wgmma + pdl_all, 4.51x) in a fresh process,
# with stress and torch.compile of the baseline timed beside it; the gate is rebuilt first on a fresh machine (~100 s).
set -u
export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-560}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
grep -q H100 $OUT/gpu.txt || { echo "not an H100: this run's times are an H100's"; exit 0; }
export RESUME_TAR=benchmarks/results/2026-12-06-session32/call1-runs.tar.gz RESUME_RUN=20261206-051045-d59944
( while sleep 20; do nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' '; echo; done ) > $OUT/gpu-memory.log 2>&1 &
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
kill %1 2>/dev/null
