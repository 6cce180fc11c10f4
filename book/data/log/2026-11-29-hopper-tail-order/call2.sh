#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/base (HEAD's systems/ and tests/) and .gpu/fz (the same with the
# one pass's dQ accumulator zeroed by the delta kernel, at::empty in place of at::zeros), built side by side;
# bench_modes.py on base, fz, base, fz; then the backward's GPU tests on .gpu/fz (Hopper and flash_cuda).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_cpp import _build_cuda; print("build:", unavailable(torch.device("cuda")), _build_cuda())'
for t in base fz; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for t in base fz base fz; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 150 python3 ../bench_modes.py $t) >> $OUT/r/modes.jsonl 2>> $OUT/r/modes.err
  echo "modes $t rc=$? after $(( $(date +%s) - t0 )) s"
done
(cd .gpu/fz && TORCH_EXTENSIONS_DIR=/tmp/ext_fz PYTHONPATH=/tmp/site:$PWD timeout $(( 560 - ($(date +%s) - t0) )) \
  python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py tests/test_flash_cuda.py -v -p no:cacheprovider \
  -k "backward_matches_the_oracle or one_pass or cs336 or operators or test_flash_cuda.py and (matches_the_oracle or deterministic or stride_zero)") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
