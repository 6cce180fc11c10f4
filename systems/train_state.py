"""What a training checkpoint holds, and the checks it passes before any of it is used.

:mod:`systems.checkpoint` guarantees a file is intact (its checksum) and holds only tensors and plain data. This
module checks that what it holds is a state a run can continue from, as a schema: every field present and of its
type, the step a count (it is the data position and the learning-rate schedule's position, so a negative one would
train with a negative learning rate), the weights the model's names and shapes and finite, the optimizer's moments
shaped like their parameters with a second moment that is not negative, the random state the generator's size. A
file made by the project's own ``save`` with values edited, or by another program, is refused with the field named,
instead of training on it.

Then :func:`differences` says whether the checkpoint is of *this* run: the settings that change the loss curve
(:data:`IDENTITY`) and the data, by its contents (:meth:`systems.data.TokenData.identity`), not its path.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from systems.checkpoint import CheckpointError

# What a resumed run must share with its checkpoint to continue the same loss curve (the model and data aside).
IDENTITY = ("seed", "global_batch_size", "grad_accum", "max_steps", "lr", "min_lr", "warmup_steps",
            "beta1", "beta2", "eps", "weight_decay", "grad_clip", "bf16")
FIELDS = {"model": dict, "optimizer": dict, "step": int, "config": dict, "world_size": int, "data": dict, "rng": dict}
MOMENTS = ("exp_avg", "exp_avg_sq")


def _refuse(path, what: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {path} cannot be resumed from: {what}")


def check(state: Any, path, model: torch.nn.Module) -> None:
    """Raise :class:`CheckpointError` naming the first field of ``state`` that a run of ``model`` cannot use."""
    _check_fields(state, path)
    _check_contents(state, path, model)


def _check_fields(state: Any, path) -> None:
    if not isinstance(state, dict):
        raise _refuse(path, f"it holds a {type(state).__name__}, not a training state")
    for name, kind in FIELDS.items():
        if name not in state:
            raise _refuse(path, f"it has no '{name}'")
        if not isinstance(state[name], kind) or isinstance(state[name], bool):
            raise _refuse(path, f"'{name}' is a {type(state[name]).__name__}, not a {kind.__name__}")
    if state["step"] < 0:
        raise _refuse(path, f"its step is {state['step']}; a step counts optimizer steps taken, from 0")
    if state["world_size"] < 1:
        raise _refuse(path, f"its world_size is {state['world_size']}")
    if not isinstance(state["config"].get("model"), dict):
        raise _refuse(path, "its 'config' holds no model settings")


def _check_contents(state: dict, path, model: torch.nn.Module) -> None:
    _check_weights(state["model"], path, model)
    _check_optimizer(state["optimizer"], path, [p.shape for p in model.parameters()])
    rng = state["rng"].get("cpu")
    reference = torch.get_rng_state()
    if not (isinstance(rng, torch.Tensor) and rng.dtype == reference.dtype and rng.shape == reference.shape):
        raise _refuse(path, f"'rng.cpu' is not a random-generator state ({reference.dtype}, {tuple(reference.shape)})")


def _check_weights(saved: dict, path, model: torch.nn.Module) -> None:
    want = model.state_dict()
    missing, extra = sorted(set(want) - set(saved)), sorted(set(saved) - set(want))
    if missing or extra:
        raise _refuse(path, f"its weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for name, tensor in saved.items():
        if not isinstance(tensor, torch.Tensor) or tensor.shape != want[name].shape:
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise _refuse(path, f"weight '{name}' is {shape}, the model's is {tuple(want[name].shape)}")
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise _refuse(path, f"weight '{name}' holds values that are not finite")


def _check_optimizer(saved: dict, path, shapes: list[torch.Size]) -> None:
    groups, states = saved.get("param_groups"), saved.get("state")
    if not (isinstance(groups, list) and isinstance(states, dict)):
        raise _refuse(path, "'optimizer' is not an optimizer state (state and param_groups)")
    indices = [i for g in groups if isinstance(g, dict) for i in g.get("params", ())]
    if sorted(indices) != list(range(len(shapes))):
        raise _refuse(path, f"its optimizer covers parameters {sorted(indices)[:5]}..., the model has {len(shapes)}")
    for i, entry in states.items():
        if not (isinstance(i, int) and 0 <= i < len(shapes) and isinstance(entry, dict)):
            raise _refuse(path, f"optimizer state {i!r} names no parameter of the model")
        step = entry.get("step")
        if not (math.isfinite(value := _number(step)) and value >= 0):
            raise _refuse(path, f"optimizer state {i} has step {step!r}; a step counts updates, from 0")
        for name in MOMENTS:
            moment = entry.get(name)
            if not (isinstance(moment, torch.Tensor) and moment.shape == shapes[i]):
                raise _refuse(path, f"optimizer state {i}'s {name} is not shaped like its parameter {tuple(shapes[i])}")
            if not torch.isfinite(moment).all() or (name == "exp_avg_sq" and (moment < 0).any()):
                raise _refuse(path, f"optimizer state {i}'s {name} holds values that are not finite"
                                    f"{' or are negative' if name == 'exp_avg_sq' else ''}")


def _number(x: Any) -> float:
    """A scalar as a float (NaN for anything else)."""
    if isinstance(x, torch.Tensor):
        return float(x) if x.numel() == 1 else math.nan
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def differences(state: dict, settings: dict, data_identity: dict) -> dict[str, tuple]:
    """The settings of :data:`IDENTITY` and the data in which ``state`` differs from this run's (``settings`` as
    ``asdict(TrainConfig)``), as name -> (saved, requested). A checkpoint written before the data's identity was
    recorded is compared by the data's path."""
    saved = state["config"]
    differ = {k: (saved.get(k), settings[k]) for k in IDENTITY if saved.get(k) != settings[k]}
    recorded = state["data"].get("identity")
    if recorded is None:
        if saved.get("data") != settings["data"]:
            differ["data"] = (saved.get("data"), settings["data"])
    elif recorded != data_identity:
        differ["data"] = (f"{state['data'].get('source')} {_described(recorded)}",
                          f"{settings['data']} {_described(data_identity)}")
    return differ


def _described(identity: dict) -> str:
    if identity.get("kind") == "bytes":
        return f"({identity['bytes']} bytes, sha256 {identity['sha256'][:12]}…)"
    if identity.get("kind") == "token ids":
        return f"({identity['tokens']} {identity['dtype']} token ids, sha256 {identity['sha256'][:12]}…)"
    return "(random tokens)"


def resume_step(state: Any, path) -> int:
    """The step a checkpoint resumes at, its fields checked first (:class:`CheckpointError` naming what is wrong)."""
    _check_fields(state, path)
    return state["step"]


def check_resumable(state: dict, path, settings: dict, model: torch.nn.Module, data_identity: dict) -> None:
    """Refuse (ValueError naming the fields) a checkpoint ``model`` cannot use (:func:`check`), one of another model,
    or one of another run (:func:`differences`) unless ``settings["resume_anyway"]``."""
    _check_fields(state, path)
    saved = state["config"]["model"]
    differ = {k: (saved.get(k), v) for k, v in settings["model"].items()
              if k not in ("attention", "fused_loss", "name") and saved.get(k) != v}
    if differ:
        raise ValueError(f"checkpoint {path} is of another model; differing fields (saved, requested): {differ}")
    _check_contents(state, path, model)
    differ = differences(state, settings, data_identity)
    if differ and not settings["resume_anyway"]:
        raise ValueError(f"checkpoint {path} is of another run; it would not continue the same curve. Differing "
                         f"settings (saved, requested): {differ}. Pass --resume-anyway to resume regardless")
