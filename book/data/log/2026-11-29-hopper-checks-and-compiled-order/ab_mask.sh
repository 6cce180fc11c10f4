#!/usr/bin/env bash
# On one H200, from the repository's root: trees .gpu/base (HEAD's systems/ and tests/) and .gpu/mask (the same with
# mask_every_tile.diff: the mask at every key tile, the stage released after P is packed), built side by side;
# fwd_ab.py on base and mask, twice, in turn; then the Hopper forward's GPU tests against the oracle on .gpu/mask.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in base mask; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 base" "0 mask" "1 base" "1 mask"; do
  set -- $turn
  (cd .gpu/$2 && TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../fwd_ab.py $2 $1) >> $OUT/r/fwd_ab.jsonl 2>> $OUT/r/fwd_ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/mask && TORCH_EXTENSIONS_DIR=/tmp/ext_mask PYTHONPATH=/tmp/site:$PWD timeout $(( 540 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -rA \
  -k "forward_variants or attention_matches") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
