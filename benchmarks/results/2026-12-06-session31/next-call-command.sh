# PREPARED for the next session (not run): this session's H100 run (call 1, run 20261206-051045-d59944, cut at 470 s
# while round 3 judged its third candidate) resumed on an H100 (a resume refuses another card: the run's times are an
# H100's). Round 3 is judged again whole (the wgmma, wgmma + pdl and wgmma + pdl_all starts, about 55 s each on the
# H100 here), then the run's final acceptance check of its best. About 300 s with the gate's lock (75 s here).
# If pdl or pdl_all is the run's best, commit its render as tasks/mla_attention/candidates/wgmma_mla.py (a test keeps
# the committed candidate a render of the template) with the run log and report. Needs .whl/, carried.
set -u
export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-540}
export RESUME_TAR=benchmarks/results/2026-12-06-session31/call1-runs.tar.gz RESUME_RUN=20261206-051045-d59944
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
grep -q H100 $OUT/gpu.txt || { echo "not an H100: the run's times are an H100's, so its resume would be refused"; exit 0; }
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
