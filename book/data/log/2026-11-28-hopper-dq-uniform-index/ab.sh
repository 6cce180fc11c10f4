#!/usr/bin/env bash
# On the GPU machine: trees .gpu/base (the parent commit's systems/ and tests/) and .gpu/dq (this commit's), built side
# by side, dq_ab.py (copied to .gpu/) on each in turn, two rounds; then the Hopper GPU tests on .gpu/dq.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())'
for t in base dq; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for rnd in 0 1; do
  for t in base dq; do
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../dq_ab.py $t $rnd) >> $OUT/r/ab.jsonl 2>> $OUT/r/ab.err
  done
  echo "round $rnd after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/dq && TORCH_EXTENSIONS_DIR=/tmp/ext_dq PYTHONPATH=/tmp/site:$PWD timeout $(( 570 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider) > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
