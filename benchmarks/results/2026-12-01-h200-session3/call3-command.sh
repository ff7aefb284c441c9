#!/usr/bin/env bash
# Session 2026-12-01 (09:41 UTC start) call 3: the offline template search on MLA (issue 13 §4), from a cold gate:
# round 1 the default point, round 2 the space's three `starts`, round 3 neighbours of the fastest, 3 proposals a
# round, stopped by SIGINT at 540 s (the run log says `incomplete (interrupted)`; --resume continues it).
set -u
echo "commit $(cat COMMIT)"
ln -sfn ../.whl .whl
CONTRACT=contracts/mla_attention.yaml MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=540 OUT=$OUT bash benchmarks/gpu_dispatch.sh
