# PREPARED for the next session (not run). On an H200: session 22's H200 run resumed (session 33's
# next-call-command.sh, about 400 s of its 600); call 5 then needs a call of its own. On any other card: call 5, the peer
# table with whole steps by the gate's clock (benchmarks/mla_template_bench.py since 15a89c3; about 75 s). Carry .whl.
set -u
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then
  exec bash benchmarks/results/2026-12-06-session33/next-call-command.sh
fi
exec bash benchmarks/results/2026-12-06-session35/call5-command.sh
