# Call 5 of session 33. On an H200: call 1's H200 branch. On an H100: call 4's run (its four rounds done, its final
# check not run: the log named the folder its rounds ran in, which this machine lacks; fixed in the dispatcher since)
# resumed again: the final check alone, of the run's best, with torch.compile beside it.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/call1-command.sh
fi
export MAX_ROUNDS=4 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-560}
export RESUME_TAR=benchmarks/results/2026-12-06-session33/call4-runs.tar.gz RESUME_RUN=20261206-051045-d59944
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run |gate" | cut -c1-300 | tail -40
