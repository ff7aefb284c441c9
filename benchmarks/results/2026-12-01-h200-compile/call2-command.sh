# Device call 2: three `ferret check`s of the honest MLA candidate (a cold gate, then two warm), each in its own process.
set -u
WHL=../.whl OPS=mla_attention CHECKS=2 BUDGET_S=430 OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -30
