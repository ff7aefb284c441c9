#!/usr/bin/env bash
# One device call for issue 11: the judge's timing repeated (benchmarks/timing_repeatability.py: 3 timings of
# each op's honest candidate, fresh timing processes each time), then the roofline sweep
# (benchmarks/roofline_sweep.py). Results go to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
start=$(date +%s)
python3 benchmarks/timing_repeatability.py --ops ${OPS:-mla_attention rmsnorm softmax rope} --gates-dir /tmp/gates --out "$out" 2> "$out/repeatability.err" | tail -60
echo "repeatability exit ${PIPESTATUS[0]} after $(( $(date +%s) - start ))s"; tail -5 "$out/repeatability.err"
if [ -z "${NO_SWEEP:-}" ]; then
  python3 benchmarks/roofline_sweep.py --ops ${OPS:-mla_attention rmsnorm softmax rope} --out "$out" 2> "$out/sweep.err" | tail -60
  echo "sweep exit ${PIPESTATUS[0]} after $(( $(date +%s) - start ))s"; tail -5 "$out/sweep.err"
fi
