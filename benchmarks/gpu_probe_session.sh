#!/usr/bin/env bash
# One device call: why MLA timings swing (benchmarks/timing_probe.py on the swinging cases, with the GPU's
# clocks sampled by nvidia-smi alongside), then where a `ferret check` of the honest MLA candidate spends
# its time (cold gate, then warm), from the progress lines' elapsed times. Results go to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 50 > "$out/clocks.csv" &
smi=$!
for c in ${PROBE_CASES:-tp8_b32_l8192 tp1_b8_l4096}; do
  python3 benchmarks/timing_probe.py --case "$c" --rounds ${ROUNDS:-8} --out "$out" > /dev/null 2> "$out/probe-$c.err" || tail -5 "$out/probe-$c.err"
done
kill $smi
python3 - "$out" <<'PY'
import json, sys, glob, statistics
for f in sorted(glob.glob(sys.argv[1] + "/timing-probe-*.json")):
    r = json.load(open(f))
    print(r["case"])
    for impl, m in r["ms"].items():
        for k, v in m.items():
            if "unix" not in k:
                print(f"  {impl:9s} {k:45s}", " ".join(f"{x*1e3:7.1f}" for x in v))
PY
if [ -n "${CHECKS:-}" ]; then
  for n in 1 2; do
    s=$(date +%s.%N)
    python3 -m ferret.cli.main check contracts/mla_attention.yaml tasks/mla_attention/candidates/triton_mla.py --gates-dir /tmp/gates --verdict-out "$out/verdict-$n.json" > /dev/null 2> "$out/check-$n.log"
    echo "check $n: exit $? in $(python3 -c "import time;print(round(time.time()-$s,1))") s"
  done
fi
