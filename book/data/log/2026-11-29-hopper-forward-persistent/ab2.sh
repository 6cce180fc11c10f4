#!/usr/bin/env bash
# On the GPU machine: trees .gpu/base (HEAD's systems/ and tests/), .gpu/new (the persistent forward, its consumer's
# index warp-uniform) and .gpu/flat (the same with a block per query tile: flat.diff), built side by side, fwd_ab.py
# on each in turn, two rounds; then the Hopper forward's GPU tests on .gpu/new.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in base flat new; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for rnd in 0 1; do
  for t in base flat new; do
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../fwd_ab.py $t $rnd) >> $OUT/r/fwd_ab.jsonl 2>> $OUT/r/fwd_ab.err
  done
  echo "round $rnd after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/new && TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout $(( 550 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -rA \
  -k "forward_variants or attention_matches or cs336") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
