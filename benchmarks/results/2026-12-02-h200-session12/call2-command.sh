# call 2 (session 12, snapshot in COMMIT): the template search from a cold gate, 3 rounds x 3 proposals
set -u
ln -sfn ../.whl .whl
CONTRACT=contracts/mla_attention.yaml MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=550 bash benchmarks/gpu_dispatch.sh > $OUT/call2-dispatch.log 2>&1
echo "rc=$?" >> $OUT/call2-dispatch.log
