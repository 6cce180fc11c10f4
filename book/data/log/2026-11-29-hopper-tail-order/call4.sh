#!/usr/bin/env bash
# One H200, from the repository's root: .gpu/tail built; the Hopper backward against the oracle (one pass and two),
# then the registered attention against the oracle at the cases call 3's run did not reach, on .gpu/tail.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
cd .gpu/tail && export TORCH_EXTENSIONS_DIR=/tmp/ext_tail PYTHONPATH=/tmp/site:$PWD
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/r/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/build.log)"
timeout $(( 150 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v -p no:cacheprovider --durations=10 \
  -k "backward_matches_the_oracle" > $OUT/r/pytest_bwd.log 2>&1
echo "pytest bwd rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_bwd.log)"
timeout $(( 185 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v -p no:cacheprovider --durations=10 \
  -k "attention_matches and (65x65 or 4100x4500 or 700x4200 or 333x777)" > $OUT/r/pytest_att.log 2>&1
echo "pytest att rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_att.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
