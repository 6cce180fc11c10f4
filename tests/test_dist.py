"""systems.dist.launch: results by rank (tensors included), a failing rank's traceback, a hang cut short."""

import time

import pytest
import torch
import torch.distributed as dist

from systems.dist import launch


def rank_tensor(rank: int, world: int) -> dict:
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    return {"rank": rank, "sum": t}


def fail_on_rank_one(rank: int, world: int) -> None:
    if rank == 1:
        raise ValueError("rank one refuses")


def hang_on_rank_one(rank: int, world: int) -> None:
    if rank == 1:
        time.sleep(60)


@pytest.mark.distributed
def test_results_come_back_by_rank_with_tensors():
    out = launch(rank_tensor, 3, backend="gloo", timeout_s=60)
    assert [o["rank"] for o in out] == [0, 1, 2]
    for o in out:
        torch.testing.assert_close(o["sum"], torch.full((3,), 3.0))


@pytest.mark.distributed
def test_a_failing_rank_raises_with_its_traceback():
    with pytest.raises(RuntimeError, match="rank 1 failed(.|\n)*rank one refuses"):
        launch(fail_on_rank_one, 2, backend="gloo", timeout_s=60)


@pytest.mark.distributed
def test_a_hanging_rank_times_out():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 5 s"):
        launch(hang_on_rank_one, 2, backend="gloo", timeout_s=5)
    assert time.monotonic() - start < 30
