"""The memory techniques, each a small unit applied to a model (`base.Technique`); none imports
Ray, a model or a task module.

`TECHNIQUES` is the registry, in the order a trial applies them to its fp32 model: checkpointing
and simulated microbatching change the model's forward, sparsity masks the fp32 weights, and
precision casts the storage last; the Adam state format sets how the optimizer keeps its moments
before the fused step, last too, takes over the optimizer's updates
(sparsity needs no change for it: the momentum lives in the optimizer's state, which sparsity
masks after every step, and the update of a masked position never reaches an active one).
"""

from .adam_state import AdamState
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
    AdamState,
    FusedStep,
)

__all__ = ["TECHNIQUES", "Technique"]
