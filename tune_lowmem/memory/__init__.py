"""The training-memory profiler: model, optimizer and activation memory of a configuration,
predicted from shapes (`predict`, fast enough to screen every point of a search) or measured in a
real training step (`measure`), both as a `MemoryReport`."""

from .measure import measure
from .predict import predict
from .report import MB, MemoryReport, baseline_config

__all__ = ["MB", "MemoryReport", "baseline_config", "measure", "predict"]
