#!/usr/bin/env bash
# Session 2026-12-01 (12:12 UTC start) call 2: three checks (1 cold, 2 warm) each of rope, rmsnorm and softmax after
# the candidate timer loads 4 copies of the candidate and takes each copy's median (issue 11 §3).
set -u
echo "commit $(cat COMMIT)"
WHL=../.whl OPS="rope rmsnorm softmax" CHECKS=2 BUDGET_S=545 OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -30
