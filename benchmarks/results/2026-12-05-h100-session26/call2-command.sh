# NOT RUN: no machine came for this call in session 26 (README.md); kept to be run by a later session
# call 2 (session 26): session 22's interrupted dispatch (an H200's) resumed on the machine that comes (its rounds 1 and 2 kept: their candidates render the
# same bytes today, Triton's kernel 3), so that round 3 judges the wgmma start and the wgmma + pdl start as the template
# renders them now (kernel 3's epilogue of this session), then the final acceptance check of the run's best
# (stopped at 390 s: what device time was left; the final check may be cut, the rounds are saved)
set -u
cp benchmarks/results/2026-12-04-h200-session22/runs.tar.gz /tmp/runs22.tar.gz
RESUME_TAR=/tmp/runs22.tar.gz RESUME_RUN=20261204-144628-8ad09c MAX_ROUNDS=3 PROPOSALS=2 DISPATCH_TIMEOUT_S=390 \
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error" | cut -c1-260 | tail -40
