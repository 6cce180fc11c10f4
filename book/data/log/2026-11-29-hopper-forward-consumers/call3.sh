#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/m (main) and .gpu/c (the forward's variant chosen for the shape)
# built side by side; fwd_bwd.py on m, c, c, m; then the forward's tests on c in the time left.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m c; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for t in m c c m; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../fwd_bwd.py $t \
    >> $OUT/r/fwd_bwd.jsonl 2>> $OUT/r/fwd_bwd.err)
  echo "fwd_bwd $t rc=$? after $(( $(date +%s) - t0 )) s"
done
cd .gpu/c && export TORCH_EXTENSIONS_DIR=/tmp/ext_c PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=b34ddc7
timeout $(( 575 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "faster_forward or not_built_for or pass_pytorchs_checks or attention_matches \
  or backward_takes_one_pass" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
