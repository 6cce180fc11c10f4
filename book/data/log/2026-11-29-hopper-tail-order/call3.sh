#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/fz (HEAD with the dQ accumulator zeroed by the delta kernel) and
# .gpu/tail (the same with the persistent grids' last heads taken rank by rank, head_rank), built side by side;
# fwd_ab.py and bwd_ab.py on fz and tail, twice, in turn; then the oracle tests of the attention on .gpu/tail.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in fz tail; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 fz" "0 tail" "1 fz" "1 tail"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../fwd_ab.py $2 $1 >> $OUT/r/fwd_ab.jsonl && timeout 100 python3 ../bwd_ab.py $2 $1 >> $OUT/r/bwd_ab.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/tail && TORCH_EXTENSIONS_DIR=/tmp/ext_tail PYTHONPATH=/tmp/site:$PWD timeout $(( 560 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v -p no:cacheprovider \
  -k "attention_matches or backward_matches_the_oracle") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
