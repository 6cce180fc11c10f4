#!/usr/bin/env bash
# On the GPU machine: trees .gpu/base (HEAD's systems/ and tests/), .gpu/new (the persistent forward, its consumer's
# index warp-uniform, the first consumer taking the last turn given) and .gpu/flat (the same with a block per query
# tile: flat.diff), built side by side; fwd_ab.py on base, flat and new, then on base and new again; then the Hopper
# forward's GPU tests against the oracle on .gpu/new, as many as the time left allows.
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
for turn in "0 base" "0 flat" "0 new" "1 base" "1 new"; do
  set -- $turn
  (cd .gpu/$2 && TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../fwd_ab.py $2 $1) >> $OUT/r/fwd_ab.jsonl 2>> $OUT/r/fwd_ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/new && TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout $(( 520 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -rA \
  -k "forward_variants or attention_matches") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
