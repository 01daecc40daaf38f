"""The memory techniques, each a small unit applied to a model (`base.Technique`); none imports
Ray, a model or a task module.

`TECHNIQUES` is the registry, in the order a trial applies them to its fp32 model: checkpointing
and simulated microbatching change the model's forward, sparsity masks the fp32 weights, and
precision casts the storage last.
"""

from .base import Technique
from .checkpointing import Checkpointing
from .microbatch import Microbatching
from .precision import Precision
from .sparsity import Sparsity

TECHNIQUES: tuple[type[Technique], ...] = (Checkpointing, Microbatching, Sparsity, Precision)

__all__ = ["TECHNIQUES", "Technique"]
