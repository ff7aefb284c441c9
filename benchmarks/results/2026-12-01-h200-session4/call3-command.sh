#!/usr/bin/env bash
# Session 2026-12-01 (12:12 UTC start) call 3: does the L2 flush buffer's allocation set the per-process offset?
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
echo "commit $(cat COMMIT)"
s=$(date +%s)
timeout 200 python3 benchmarks/offset_source_probe.py --processes 4 --count 4 --only-flush --out $OUT > $OUT/offset-probe-flush.log 2>&1; tail -40 $OUT/offset-probe-flush.log | grep -v '^ *[0-9.,]*$'
echo "probe $(( $(date +%s)-s )) s"
