#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/base (HEAD's systems/ and tests/) and .gpu/expo (the same with
# two_p_exponentials_apart.diff), built side by side; fwd_ab.py on base and expo, twice, in turn; breakdown.py on
# base; then the forward's GPU tests against the oracle on .gpu/expo.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in base expo; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 base" "0 expo" "1 base" "1 expo"; do
  set -- $turn
  (cd .gpu/$2 && TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../fwd_ab.py $2 $1) >> $OUT/r/fwd_ab.jsonl 2>> $OUT/r/fwd_ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD timeout 150 python3 ../breakdown.py base) > $OUT/r/breakdown.jsonl 2> $OUT/r/breakdown.err
echo "breakdown rc=$? after $(( $(date +%s) - t0 )) s"
(cd .gpu/expo && TORCH_EXTENSIONS_DIR=/tmp/ext_expo PYTHONPATH=/tmp/site:$PWD timeout $(( 540 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -rA \
  -k "forward_variants or attention_matches") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
