# call 1 (session 22, 2026-12-04 14:46 UTC): the offline loop on the contiguous MLA contract at production shapes, 3 rounds
# of at most 3 proposals, stopped by SIGINT at 545 s so that the run log is saved (carry: .whl)
CONTRACT=contracts/mla_attention.yaml MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=545 bash benchmarks/gpu_dispatch.sh
