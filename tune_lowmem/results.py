"""One home for the names of what a trial reports: the memory columns, the memory objective and
the directions an objective takes. The search, the trainable, the store and the analysis all
read them here; it imports nothing, so each of them can. Where a reported metric lives in the
store is `store.store_column`.
"""

from __future__ import annotations

DIRECTIONS = ("maximize", "minimize")
PARTS = ("model", "optimizer", "activation", "total")  # the profiler's parts of a step's memory
# A CUDA trial's peaks as its caching allocator saw them: live tensors, and what it reserved.
CUDA_PEAK_COLUMNS = ("cuda_max_allocated_mb", "cuda_max_reserved_mb")

# The run's peak: the most bytes live at once over everything a trial does (each training step
# with its input, the techniques' occasional work such as a rewiring, evaluation), predicted
# before training and measured by torch's allocator (empty in rows of stores written before it)
PREDICTED_RUN_PEAK = "memory.predicted_run_peak_mb"
FLOPS_METRIC = "memory.flops_per_step"  # forward, backward and recomputation of one minibatch
MEASURED_RUN_PEAK = "memory.measured_run_peak_mb"
# The profiler's prediction (known before training) and the measurement (known once it starts),
# named as the store's columns: the parts of a training step as the paper counts them, and the
# run's peak. `memory.predicted_total_mb` is the memory objective of stores' older sweeps.
# A CUDA trial's predicted run peak by part (`memory.cuda.CudaPrediction`): of the run peak,
# the allocator's 512-byte blocks beyond the tensors' bytes (rounding), the BLAS workspaces and
# cuDNN's at the peak (empty: not known where it was predicted); beside it, the CUDA context
# and what the allocator reserves for it. Empty in a CPU trial's rows and in older stores.
CUDA_PREDICTED_METRICS = tuple(
    f"memory.predicted_cuda_{part}_mb"
    for part in ("rounding", "blas", "cudnn", "context", "reserved")
)
PREDICTED_METRICS = (
    *(f"memory.predicted_{part}_mb" for part in PARTS),
    PREDICTED_RUN_PEAK,
    FLOPS_METRIC,
    *CUDA_PREDICTED_METRICS,
)
MEASURED_METRICS = (*(f"memory.measured_{part}_mb" for part in PARTS), MEASURED_RUN_PEAK)
# Both totals as the masked step holds them (the ones above count sparse weights as CSR)
STORED_METRICS = tuple(f"memory.{kind}_stored_total_mb" for kind in ("predicted", "measured"))
# The paper's accounting of the prediction, sparse weights as CSR whatever `sparsity.storage` is:
# the comparison column of reproduction sweeps (empty in rows of stores written before it)
PAPER_CSR_METRIC = "memory.paper_csr_total_mb"
CUDA_PEAK_METRICS = tuple(f"memory.{column}" for column in CUDA_PEAK_COLUMNS)  # GPU trials
MEMORY_OBJECTIVE = "memory.predicted_total_mb"
MEASURED_TOTAL = "memory.measured_total_mb"
