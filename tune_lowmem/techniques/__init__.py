"""The memory techniques, each a small unit applied to a model (`base.Technique`); none imports
Ray, a model or a task module.

`TECHNIQUES` is the registry, in the order a trial applies them to its fp32 model: checkpointing
and simulated microbatching change the model's forward, sparsity masks the fp32 weights, and
precision casts the storage last; the fused step comes after them all, so that its gradient hooks
run after any other technique's (sparsity's masking).
"""

from .base import Technique
from .checkpointing import Checkpointing
from .fused_step import FusedStep
from .microbatch import Microbatching
from .precision import Precision
from .sparsity import Sparsity

TECHNIQUES: tuple[type[Technique], ...] = (
    Checkpointing,
    Microbatching,
    Sparsity,
    Precision,
    FusedStep,
)

__all__ = ["TECHNIQUES", "Technique"]
