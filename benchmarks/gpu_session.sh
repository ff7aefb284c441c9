#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): carried wheels for what its image lacks, the GPU
# tests (honest candidates at production shapes, timed by the judge; then the MLA simplifications),
# and the benchmark result collected from the gates' reports. Logs and results go to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
start=$(date +%s)
python3 -m pytest -m gpu tests/gpu -k "${HONEST_K:-honest}" -rA --durations=0 -p no:cacheprovider --timeout ${TEST_TIMEOUT:-240} 2>&1 | tee "$out/pytest-honest.log" | grep -E "passed|failed|PASS|FAIL|Error|error" | tail -20
status=${PIPESTATUS[0]}  # pytest's, not the filter's: the call's exit says whether the tests passed
python3 benchmarks/gate_speed.py --from-reports ${BENCH_OPS:+--ops $BENCH_OPS} --gates-dir /tmp/gates --out "$out" 2>&1 | tail -25
if [ $(( $(date +%s) - start )) -lt ${SIMPLIFICATIONS_IF_UNDER_S:-330} ]; then
  python3 -m pytest -m gpu tests/gpu -k simplifications -rA --durations=0 -p no:cacheprovider --timeout 120 2>&1 | tee "$out/pytest-simplifications.log" | grep -E "passed|failed|Error" | tail -8
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  echo "gpu_session: skipped the simplification tests (time)"
fi
for f in /tmp/gates/*/report.json; do cp "$f" "$out/report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done; echo "elapsed $(( $(date +%s) - start ))s"
exit "$status"
