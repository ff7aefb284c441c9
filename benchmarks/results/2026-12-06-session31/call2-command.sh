# NOT RUN in session 31: no call came for it (call 1 ran with FRESH=0, then FRESH=1 with too little time left after).
# call 2 (session 31), on the machine call 1 left warm: the run call 1 cut at DISPATCH_TIMEOUT_S (the one run in
# .device-run/runs) resumed with the same budget, through round 3.
set -u
export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-540}
export RESUME_RUN=$(ls $RUNS_DIR | tail -1)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; echo "resuming $RESUME_RUN"; } > $OUT/call2-gpu.txt 2>&1
cat $OUT/call2-gpu.txt
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
