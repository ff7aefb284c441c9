#!/usr/bin/env bash
# Session 2026-12-01 (09:41 UTC start) call 2: three checks (one cold, two warm) of MLA, then of the paged MLA, after
# the judge's overlap of its serial phases (7771070, and the fresh draw and inputs in threads); the paged candidate
# compiles once (c95b229). Same form as the previous session's call 3.
set -u
echo "commit $(cat COMMIT)"
WHL=../.whl OPS="mla_attention mla_attention_paged" CHECKS=2 BUDGET_S=540 OUT=$OUT bash benchmarks/gpu_repeat_session.sh
