# call 1 (session 25): the pdl and pdl + fused-tail renders on the H200: their GPU tests, the gate's check of the
# wgmma point with launch_overlap=pdl and merge_unabsorb=fused (the space's sixth start), then Nsight Compute on that
# point's step at full_h128 B=1 and B=8 (every kernel, one launch each; ncu flushes the caches before each pass)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; ncu --version | tail -1; } > $OUT/call1-gpu.txt 2>&1
start=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py -rA > $OUT/call1-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-kernel-tests.log
tail -3 $OUT/call1-kernel-tests.log
python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma --set launch_overlap=pdl --set merge_unabsorb=fused --out /tmp/wgmma_pdl_fused_mla.py 2>/dev/null
cp /tmp/wgmma_pdl_fused_mla.py $OUT/call1-candidate.py
start=$(date +%s)
timeout 320 python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_pdl_fused_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call1-verdict.json > $OUT/call1-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-check.log
grep -E "^ferret .*(us|PASS|FAIL)" $OUT/call1-check.log | tail -14 | cut -c1-300
start=$(date +%s)
timeout 100 ncu --clock-control none --set full -k 'regex:mla_wgmma|_q_prepare|_unabsorb|_merge|_kv_append' -o /tmp/ncu1 \
  python3 -W ignore benchmarks/mla_ncu.py --shapes h128_b1_l4096 h128_b8_l4096 --point attention_kernel=wgmma,launch_overlap=pdl,merge_unabsorb=fused --out /tmp/ncu-points > $OUT/call1-ncu.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-ncu.log
ncu --import /tmp/ncu1.ncu-rep --page details > $OUT/call1-ncu-details.txt 2>&1
tail -2 $OUT/call1-ncu.log
grep -E "^  [a-zA-Z_]+.*\(|Duration|DRAM Throughput|Registers Per" $OUT/call1-ncu-details.txt | head -60
