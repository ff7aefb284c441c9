#!/usr/bin/env bash
# One device call for issue 11: optionally the sandbox probe (PROBE_OPS), then `ferret check` of each op's honest candidate, a cold gate then 3 warm checks
# (benchmarks/timing_repeatability.py run), then the roofline sweep if SWEEP_OPS is set. Results in $OUT:
# checks.jsonl (one verdict per check), roofline-sweep.jsonl, logs. Run from a clean snapshot of a commit
# (git archive) so that uncommitted files never travel into the evidence; WHL names the carried wheels.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt" 2>&1
if [ -n "${PROBE_OPS:-}" ]; then
  timeout 150 python3 benchmarks/sandbox_probe.py --ops $PROBE_OPS 2>&1 | tee "$out/sandbox-probe.log"
fi
if [ -n "${OPS:-}" ]; then
  python3 benchmarks/timing_repeatability.py run --ops $OPS --checks ${CHECKS:-3} --gates-dir /tmp/gates --out "$out" \
    --budget-s ${BUDGET_S:-540} 2>&1 | tee "$out/repeat.log"
  python3 benchmarks/timing_repeatability.py table "$out/checks.jsonl" > "$out/repeat-table.md"
fi
if [ -n "${SWEEP_OPS:-}" ]; then
  left=$(( ${TOTAL_S:-570} - ($(date +%s) - start) ))
  python3 benchmarks/roofline_sweep.py --ops $SWEEP_OPS --out "$out" --budget-s $(( left - 60 )) 2>&1 | tail -40
fi
echo "elapsed $(( $(date +%s) - start ))s"
