#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/m (main) and .gpu/nu (uniform_if_masked.diff) built side by side;
# fwd_layouts.py in turn (main: both parts twice; nu: the unmasked part twice); then the forward's choice tests on m.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m nu; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m layout,nc" "0 nu nc" "1 nu nc" "1 m nc,layout"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 120 python3 ../fwd_layouts.py $2 $1 $3 >> $OUT/r/fwd_layouts.jsonl) 2>> $OUT/r/fwd.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
cd .gpu/m && export TORCH_EXTENSIONS_DIR=/tmp/ext_m PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=b34ddc7
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "faster_forward or faster_backward" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
