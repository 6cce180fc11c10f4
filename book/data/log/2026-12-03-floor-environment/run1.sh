set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
D=book/data/log/2026-12-03-floor-environment
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/r/machine.txt
python3 -c "import torch, triton, platform; print(torch.__version__, triton.__version__, torch.version.cuda, platform.processor(), __import__('os').cpu_count())" >> $OUT/r/machine.txt
cat $OUT/r/machine.txt
t0=$(date +%s)
python3 -c "
import torch
from systems.attention.flash_cpp import hopper, cuda_unavailable
from systems.attention.flash_triton import host
print('hopper', hopper.unavailable(torch.device('cuda')), 'cuda', cuda_unavailable(torch.device('cuda')), 'host', host.unavailable())
" 2>&1 | tail -3
echo build $(( $(date +%s) - t0 )) s
timeout -s KILL 200 python3 $D/floor_env.py 7 > $OUT/r/floor_env.jsonl 2> $OUT/r/floor_env.err; echo floor_env rc=$? $(( $(date +%s) - t0 )) s
python3 -c "
import json
for l in open('$OUT/r/floor_env.jsonl'):
    r = json.loads(l); print(f\"{r['phase'][:40]:40s} {r['impl']:13s} {r['mode']:10s} host {r['host_us']:7.1f} wall {r['wall_us']:7.1f}\")
"
timeout -s KILL 200 python3 $D/steps_busy.py small:2048 small:1024 medium:2048 > $OUT/r/steps_busy.jsonl 2> $OUT/r/steps_busy.err; echo busy rc=$? $(( $(date +%s) - t0 )) s
grep -v '"own"' $OUT/r/steps_busy.jsonl
tail -3 $OUT/r/floor_env.err $OUT/r/steps_busy.err
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
tar czf $OUT/cache.tgz .gpu/ext
