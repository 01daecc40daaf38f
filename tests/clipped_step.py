"""A user's own step, as a user would write it outside the project: fp32, every update's
gradients clipped to a global norm before the optimizer steps.

Installed packages register it under the ``tune_lowmem.techniques`` entry-point group
(tests/test_step_runner.py writes such a package's metadata) and a config names it in
``step_runner``; nothing of tune_lowmem changes. Its one setting is the norm.
"""

from __future__ import annotations

import torch

from tune_lowmem.techniques.base import StepRunner
from tune_lowmem.techniques.setting import Setting
from tune_lowmem.validation import positive_float


class ClippedStep(StepRunner):
    """Clips the gradients to `clip_norm` where the default step would unscale them."""

    NAME = "clipped_step"
    SETTINGS = (Setting("clip_norm", float, 1.0),)

    def __init__(self, config, task):
        super().__init__(config, task)
        self.norms: list[torch.Tensor] = []  # each update's norm before clipping

    @classmethod
    def validate(cls, config, task) -> None:
        positive_float(config.clip_norm, "clip_norm")

    @classmethod
    def shape_settings(cls, config) -> dict[str, float]:
        return {}  # the clipping's temporaries do not depend on the norm

    def unscale_(self, parameters, finite=None) -> bool:
        self.norms.append(torch.nn.utils.clip_grad_norm_(list(parameters), self.config.clip_norm))
        return True if finite is None else finite
