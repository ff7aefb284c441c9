# Nsight Compute (--set full, clocks not locked, caches flushed before each pass) on one MLA decode step of the committed
# candidate's point (attention_kernel=wgmma), FlashMLA's dense decode core on the same inputs and cuBLAS's bmm of
# kernel 2's absorption, at 128 heads, L=4096, B=64 and B=128 (benchmarks/mla_ncu.py; NVTX ranges step/, flashmla/,
# absorb_bmm/ keep the reference's GEMMs out), cut at 240 s. Writes $OUT/$1-ncu-details.txt. A call's command runs
# it after its set-up (PYTHONPATH with the wheels): bash profile-kernels.sh PREFIX.
prefix=$1
start=$(date +%s)
timeout 240 ncu --clock-control none --set full --nvtx --nvtx-include "step/" --nvtx-include "flashmla/" \
  --nvtx-include "absorb_bmm/" -k 'regex:q_prepare|mla|gemm|nvjet|xmma|cutlass|bf16|sm90' -c 16 -o /tmp/kprof \
  --force-overwrite python3 benchmarks/mla_ncu.py --shapes h128_b64_l4096 h128_b128_l4096 \
  --point attention_kernel=wgmma --absorb-bmm > /tmp/ncu.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s" >> /tmp/ncu.log
tail -8 /tmp/ncu.log | cut -c1-220
ncu -i /tmp/kprof.ncu-rep --page details > $OUT/$prefix-ncu-details.txt 2>&1
cat /tmp/ncu.log >> $OUT/$prefix-ncu-details.txt
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per" \
  $OUT/$prefix-ncu-details.txt | head -70 | cut -c1-150
