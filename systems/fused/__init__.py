"""The training step's other fused kernels, beside attention (2026 handout §9, the leaderboard's suggestions):

* :mod:`.cross_entropy`: the LM head and the cross-entropy loss in one, from the final hidden states and the output
  weight straight to the loss and both gradients, a chunk of tokens at a time, so the whole logits never exist;
* :mod:`.adamw`: AdamW as one pass over memory, every parameter of a dtype updated by one kernel launch.

Both are Triton kernels with their PyTorch glue; on a machine without a GPU they run in Triton's interpreter.

    from systems.fused import FusedAdamW, linear_cross_entropy
    loss = linear_cross_entropy(hidden, model.lm_head.weight, targets)    # = F.cross_entropy(hidden @ W.T, targets)
    optimizer = FusedAdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
"""

from systems.fused.adamw import FusedAdamW
from systems.fused.cross_entropy import linear_cross_entropy

__all__ = ["FusedAdamW", "linear_cross_entropy"]
