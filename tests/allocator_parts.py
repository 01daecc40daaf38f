"""Model and optimizer memory as torch's allocator holds it, for checks that must share no code
with the prediction's accounting (`memory.accounting`): the storages of a real trainer's tensors
at the run's peak step, as `memory.allocations` reads them from the allocator's reports (the CPU
allocator's or CUDA's caching allocator's), at each step `memory.stepping.at_peak` takes."""

from __future__ import annotations

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.allocations import measure_allocations
from tune_lowmem.memory.stepping import at_peak, synthetic_trainer

# buffers the paper's model part leaves out: a norm layer's running statistics and step count,
# a packed sparse weight's dense shape (its values and index are counted)
UNCOUNTED_BUFFERS = ("running_mean", "running_var", "num_batches_tracked", "weight_shape")


def allocator_parts(config: TrialConfig) -> tuple[int, int]:
    """(model, optimizer) bytes of `config`'s trainer at its run's peak step, as the allocator
    holds them: the model's parameters and the buffers the paper counts (a packed weight's
    index), and the gradients and optimizer state."""
    measured = at_peak(measure_allocations, config)
    model = synthetic_trainer(config, None)[0].model
    uncounted = {
        buffer.untyped_storage().data_ptr(): buffer.untyped_storage().nbytes()
        for name, buffer in model.named_buffers()
        if name.rsplit(".", 1)[-1] in UNCOUNTED_BUFFERS
    }
    return measured.model_bytes - sum(uncounted.values()), measured.optimizer_bytes
