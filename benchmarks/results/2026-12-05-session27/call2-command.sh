# NOT RUN: sessions 27 and 28 had no device time (README.md); prepared for a later session, after call 1 shows pdl_all passes
# its GPU tests. Needs .whl/ (scripts/device_wheels.sh), carried.
# call 2 (session 27): session 22's interrupted dispatch (an H200's) resumed, its rounds 1 and 2 kept (their candidates
# render the same bytes today), so that round 3 judges the wgmma start, the wgmma + pdl start and the wgmma + pdl_all
# start as the template renders them now; then the final acceptance check of the run's best. With session 22's run
# log, the optimizer's first three proposals for round 3 are those three starts in that order (simulated on the CPU,
# 2026-12-05: ferret.dispatch.dispatcher._feedback over the log's rounds, TemplateSearchOptimizer.propose). Stopped at
# 530 s: the rounds are saved as they end, the final check may be cut.
set -u
cp benchmarks/results/2026-12-04-h200-session22/runs.tar.gz /tmp/runs22.tar.gz
RESUME_TAR=/tmp/runs22.tar.gz RESUME_RUN=20261204-144628-8ad09c MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=530 \
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error" | cut -c1-260 | tail -40
