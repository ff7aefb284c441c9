# Call 8 of session 33: the CUDA backend's launches on torch's stream through CuPy's Stream.from_external (CuPy 14
# deprecates ExternalStream), on a GPU: the backend's programmatic-launch test, the wgmma kernel's GPU tests (its
# launches plain and programmatic), then the CUDA candidates' GPU tests as far as the time allows. Deprecation warnings
# naming ExternalStream are counted in each log.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
for t in test_cuda_backend_gpu test_wgmma_attention_gpu test_cuda_candidates_gpu; do
  timeout ${LIMIT_S:-80} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/$t.py -rA -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/$t.log 2>&1
  echo "pytest rc=$?" >> $OUT/$t.log
  echo "== $t: $(grep -c 'ExternalStream is deprecated' $OUT/$t.log) lines naming ExternalStream's deprecation"
  grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/$t.log | tail -5 | cut -c1-240
done
