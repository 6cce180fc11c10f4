"""handout_ms on a GPU (f212d53): the leaderboard command's model step at 2 blocks with 1 s of repetitions, so that
a step of about 0.9 s gets fewer than three of do_bench's and is timed three times more. Prints what do_bench and
time_steps returned for each point, then the command's table."""
import triton.testing

import systems.bench.timing as timing
from systems.device import use_expandable_segments

use_expandable_segments()
bench, steps = triton.testing.do_bench, timing.time_steps


def do_bench_spy(*args, **kwargs):
    ms = bench(*args, **kwargs)
    print("do_bench", round(ms, 2), flush=True)
    return ms


def time_steps_spy(*args, **kwargs):
    timed = steps(*args, **kwargs)
    print("time_steps", [round(t, 2) for t in timed.times_ms], "mean", round(timed.mean_ms, 2), flush=True)
    return timed


triton.testing.do_bench, timing.time_steps = do_bench_spy, time_steps_spy
from systems.bench import leaderboard_2026 as lb  # noqa: E402

lb.main(["model", "--layers", "2", "--attention", "flash", "--recompute", "offload", "--rep", "1000"])
