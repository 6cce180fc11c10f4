#!/usr/bin/env bash
# One H200: e (main at 00fa8a6, the skipped first tile committed) built; the registered attention's oracle cases
# (forward and backward through its autograd node), PyTorch's operator checks and the model under autocast.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
cd .gpu/e && export TORCH_EXTENSIONS_DIR=/tmp/ext_e PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=00fa8a6
timeout 200 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v -p no:cacheprovider \
  -k "attention_matches or pytorchs_checks or model_matches" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
