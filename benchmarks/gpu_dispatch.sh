#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): the offline loop on a contract at production shapes.
# `ferret dispatch` with the template-search optimizer, the static reviewer and no test-writer adviser
# (named: no LLM is reachable from that machine), then the run folder (every round's candidate, the run log) packed for the trip
# back, with the gate's report. Logs and results go to $OUT.
#   CONTRACT=contracts/mla_attention.yaml MAX_ROUNDS=3 PROPOSALS=2 bash benchmarks/gpu_dispatch.sh
# To continue an interrupted run of an earlier call, name its packed runs and its id (the contract is the run's own):
#   RESUME_TAR=benchmarks/results/<folder>/runs.tar.gz RESUME_RUN=<run id> MAX_ROUNDS=3 PROPOSALS=2 bash ...
# RUNS_DIR and GATES_DIR (default /tmp/runs, /tmp/gates) may name ignored folders of the repository, which a warm
# machine keeps between calls: a run cut at DISPATCH_TIMEOUT_S then goes on in the next call with RESUME_RUN alone.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
runs=${RUNS_DIR:-/tmp/runs} gates=${GATES_DIR:-/tmp/gates}
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=$gates PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
start=$(date +%s)
if [ -n "${RESUME_TAR:-}" ]; then
  mkdir -p "$runs" && tar -xzf "$RESUME_TAR" -C "$runs" --strip-components=1 || exit 1  # its runs/<id> lands in $runs
fi
if [ -n "${RESUME_RUN:-}" ]; then
  target=(--resume "$runs/$RESUME_RUN")
else
  target=("${CONTRACT:-contracts/mla_attention.yaml}")
fi
# SIGINT before the call's own limit: the run stops as `incomplete (interrupted)` with its log saved.
timeout -s INT "${DISPATCH_TIMEOUT_S:-530}" python3 -m ferret.cli.main dispatch "${target[@]}" --profile gpu --gates-dir "$gates" \
  --runs-dir "$runs" --max-rounds "${MAX_ROUNDS:-3}" --proposals-per-round "${PROPOSALS:-2}" \
  --optimizer template-search --reviewer static --test-writer contract-cases \
  > "$out/dispatch-stdout.txt" 2> >(tee "$out/dispatch-progress.log" >&2)
status=$?
echo "dispatch exit $status after $(( $(date +%s) - start ))s"
cat "$out/dispatch-stdout.txt"
tar -czf "$out/runs.tar.gz" -C "$(dirname "$runs")" "$(basename "$runs")"
for f in "$gates"/*/report.json; do cp "$f" "$out/report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/nvidia-smi.csv" 2>&1
exit "$status"
