"""The GPU check's plug-in task: the blob MLP of tests/tiny_task.py, whose one point of width
`HOG_HIDDEN` holds `HOG_MB` more than the profiler sees (a buffer only its real model has), so
its trial outgrows its predicted share. Named ``benchmarks.gpu_check_task:HungryBlobs``."""

from __future__ import annotations

import torch
from torch import nn

from tests.tiny_task import TinyBlobs

HOG_HIDDEN = 1000  # the mispredicted point's width
HOG_MB = 5_000  # over the 1% of a card (the smallest share) of any GPU up to 500 GB


class HungryBlobs(TinyBlobs):
    def build_model(self) -> nn.Module:
        model = super().build_model()
        if not self.synthetic and self.config.model.hidden == HOG_HIDDEN:
            model.register_buffer("hog", torch.zeros(HOG_MB * 10**6 // 4))
        return model
