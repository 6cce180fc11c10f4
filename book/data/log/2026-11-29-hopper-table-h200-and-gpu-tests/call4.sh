#!/usr/bin/env bash
# One H200, from the repository's root: c = main (c181410) with zero_in_launch_delta.diff (launch_delta zeroes nothing
# where it is handed no accumulator, so its callers pass the accumulator's size as it is); the backward's GPU tests of
# both CUDA C++ kernels on c.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
cd .gpu/c && export TORCH_EXTENSIONS_DIR=/tmp/ext_c PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=c181410
timeout 220 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py tests/test_flash_cuda.py -v -p no:cacheprovider \
  -k "backward_matches_the_oracle or one_pass or test_flash_cuda.py and (matches_the_oracle or deterministic)" \
  > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
