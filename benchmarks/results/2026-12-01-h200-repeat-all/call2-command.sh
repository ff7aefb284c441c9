#!/usr/bin/env bash
# Session 2026-12-01 call 2: the process-offset probe of rope decode (6 fresh processes, seeds 1 and 2), then three
# checks (one cold, two warm) of the paged MLA contract.
set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
timeout 150 python3 benchmarks/process_offset_probe.py --op rope --case decode_q_64x128 --processes 6 --out $OUT 2>&1 | grep -v '^  ' | tail -12
WHL=../.whl OPS="mla_attention_paged" CHECKS=2 BUDGET_S=400 OUT=$OUT bash benchmarks/gpu_repeat_session.sh
