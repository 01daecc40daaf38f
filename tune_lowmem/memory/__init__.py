"""The training-memory profiler: model, optimizer and activation memory of a configuration,
predicted from shapes (`tune_lowmem.memory.predict.predict`, fast enough to screen every point
of a search) or measured in a real training step (`tune_lowmem.memory.measure.measure`), both
as a `MemoryReport`.

The two functions are imported from their modules, not re-exported here: a package attribute
named like its submodule would hide the module (``import tune_lowmem.memory.predict`` must give
the module, whose helpers such as `dry_run` benchmarks and tests use).
"""

from .report import MB, MemoryReport, baseline_config

__all__ = ["MB", "MemoryReport", "baseline_config"]
