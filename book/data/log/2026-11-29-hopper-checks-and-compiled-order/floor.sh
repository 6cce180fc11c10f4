#!/usr/bin/env bash
# On one H200, from the repository's root: trees .gpu/old (dfdcc41: a block per query tile) and .gpu/new (HEAD: the
# persistent forward, its tile counter zeroed on every call), built side by side; floor_ab.py on old and new, twice,
# in turn; then the GPU tests of the C++ operator paths on .gpu/new, as many as the time left allows.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in old new; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 old" "0 new" "1 old" "1 new"; do
  set -- $turn
  (cd .gpu/$2 && TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../floor_ab.py $2 $1) >> $OUT/r/floor_ab.jsonl 2>> $OUT/r/floor_ab.err
  echo "round $1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/new && TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout $(( 560 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_triton_host.py tests/test_flash_hopper.py tests/test_fused.py tests/test_flash_cuda.py \
  -q -p no:cacheprovider -rA) > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
