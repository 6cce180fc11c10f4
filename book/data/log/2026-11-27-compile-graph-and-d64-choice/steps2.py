# Compiled training steps at context 2,048, flash_hopper against sdpa on one model, interleaved (chapter 20's method,
# fixed batches: the largest chapter 20 found), 10 timed steps each: median ratio and its 95 % interval.
import json, sys
from systems.bench.attention_steps import interleaved
from systems.bench.flash_sweep import _step_config, ratio_interval
from systems.bench.e2e import vary
for size, batch in [tuple(x.split(":")) for x in sys.argv[1:]]:
    rows = interleaved(vary(_step_config(size, 2048, 2048, "bf16", 3, 10, compiled=True), batch_size=int(batch)),
                       ("sdpa", "flash_hopper"))
    by = rows.set_index("attention")
    if (rows.status != "ok").any():
        print(json.dumps(dict(size=size, batch=int(batch), status=list(rows.status))), flush=True)
        continue
    ratio = by.step_ms["flash_hopper"] / by.step_ms["sdpa"]
    low, high = ratio_interval(by.step_times_ms["flash_hopper"], by.step_times_ms["sdpa"])
    print(json.dumps(dict(size=size, batch=int(batch), sdpa=by.step_ms["sdpa"], flash_hopper=by.step_ms["flash_hopper"],
                          ratio=ratio, low=low, high=high, times=by.step_times_ms.to_dict())), flush=True)
