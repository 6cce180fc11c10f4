set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
D=book/data/log/2026-12-03-floor-environment
mkdir -p $OUT/r
t0=$(date +%s)
for i in 1 2; do
timeout -s KILL 120 python3 -c "
import json
from systems.bench.attention_steps import interleaved, paired_ratio, ratio_interval
from systems.bench.flash_sweep import _step_config
rows = interleaved(_step_config('small', 2048, 8192, 'bf16', 3, 40), ('sdpa', 'flash')).set_index('attention')
ours, theirs = rows.step_times_ms['flash'], rows.step_times_ms['sdpa']
print(json.dumps({'sdpa_ms': rows.step_ms['sdpa'], 'flash_ms': rows.step_ms['flash'], 'ratio': paired_ratio(ours, theirs), 'interval': ratio_interval(ours, theirs), 'flash_times': ours, 'sdpa_times': theirs}))
" > $OUT/r/steps_small_2048_$i.json 2> $OUT/r/steps_$i.err; echo steps $i rc=$? $(( $(date +%s) - t0 )) s; cut -c1-200 $OUT/r/steps_small_2048_$i.json
done
for a in sdpa flash; do
timeout -s KILL 100 python3 $D/host_ops.py small 2048 $a > $OUT/r/host_ops_$a.jsonl 2> $OUT/r/host_ops_$a.err; echo ops $a rc=$? $(( $(date +%s) - t0 )) s
python3 -c "
import json
for l in list(open('$OUT/r/host_ops_$a.jsonl'))[:22] + list(open('$OUT/r/host_ops_$a.jsonl'))[-1:]:
    r = json.loads(l); print(f\"{r['op'][:60]:60s} self {r['self_us']:9.1f} total {r.get('total_us', 0):9.1f} calls {r.get('calls', 0):6.1f}\")
"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
