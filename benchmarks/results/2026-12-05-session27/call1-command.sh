# RUN in session 29 (an H100, 2026-12-05; ../2026-12-05-session29/). Prepared in sessions 27 and 28 (no device time). Session 26's call 1,
# the same three steps, took 422 s with the machine's start; kernel 2's probe takes what is left of 570 s. Needs .whl/
# (scripts/device_wheels.sh), carried; cuda-bindings is on the image.
# call 1 (session 27): launch_overlap=pdl_all (kernel 3 a programmatic dependent of kernel 2; the wgmma kernel 3 loads
# its first two tiles' older rows before griddepcontrol.wait): the backend's programmatic launch and the wgmma GPU
# tests (pdl_all's kernel 3 on every case, both overlapped starts' whole steps), whole steps as CUDA-graph replays of
# pdl against pdl_all with each kernel's device time, then the gate's check of the pdl_all point
set -u
call_start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy, cuda.bindings; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, 'cuda-bindings', cuda.bindings.__version__)"; } > $OUT/call1-gpu.txt 2>&1
cat $OUT/call1-gpu.txt
start=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_backend_gpu.py tests/gpu/test_wgmma_attention_gpu.py -rA > $OUT/call1-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-kernel-tests.log
grep -E "FAILED|ERROR|passed|failed" $OUT/call1-kernel-tests.log | tail -8 | cut -c1-240
start=$(date +%s)
timeout 120 python3 -W ignore benchmarks/mla_step_graph_probe.py --out /tmp/graph --shapes 1:128:4096 8:128:4096 64:128:4096 --kernels \
  --point attention_kernel=wgmma,launch_overlap=pdl --point attention_kernel=wgmma,launch_overlap=pdl_all > $OUT/call1-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-probe.log
cp /tmp/graph/step-graph-probe.jsonl $OUT/call1-step-graph-probe.jsonl 2>/dev/null
tail -14 $OUT/call1-probe.log | cut -c1-200
python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma --set launch_overlap=pdl_all --out /tmp/wgmma_pdl_all_mla.py 2>/dev/null
cp /tmp/wgmma_pdl_all_mla.py $OUT/call1-candidate.py
start=$(date +%s)
timeout 330 python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_pdl_all_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call1-verdict.json > $OUT/call1-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-check.log
grep -E "^ferret .*(us|PASS|FAIL)|rc=" $OUT/call1-check.log | tail -16 | cut -c1-300
# then, in what is left of the call's 600 s (session 28 added this step after the check, so that it cannot cut the check
# short): the paged template's pdl and pdl_all points (Triton's kernel 3 with its grid-dependency wait on, never run
# on a GPU) on the paged contract's two GPU cases, against the float64 reference
left=$(( 570 - ($(date +%s) - call_start) ))
if [ "$left" -gt 60 ]; then
  start=$(date +%s)
  timeout "$(( left < 150 ? left : 150 ))" python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py -k pdl -rA -s > $OUT/call1-paged-tests.log 2>&1
  echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-paged-tests.log
  grep -E "FAILED|ERROR|passed|failed| us, " $OUT/call1-paged-tests.log | tail -8 | cut -c1-240
fi
# and then session 26's call 3 (kernel 2 alone at B=1 and B=8, 128 heads, its launch
# variants, the per-head and GEMV forms, beside cuBLAS's bmm and a copy of the same bytes)
left=$(( 570 - ($(date +%s) - call_start) ))
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 -W ignore benchmarks/q_prepare_probe.py --out /tmp/qp --shapes 1:128,8:128 --heads-form --gemv-form > $OUT/call1-q-prepare-probe.log 2>&1
  echo "q_prepare probe rc=$? (limit ${left}s)" >> $OUT/call1-q-prepare-probe.log
  cp /tmp/qp/q-prepare-probe.jsonl $OUT/call1-q-prepare-probe.jsonl 2>/dev/null
  tail -12 $OUT/call1-q-prepare-probe.log | cut -c1-200
fi
