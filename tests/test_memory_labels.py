"""Stored against accounted figures: what a real (packed) step holds, and what a trial's row
records."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tests.conftest import tiny_wrn_config
from tune_lowmem import store
from tune_lowmem.memory import MemoryReport
from tune_lowmem.memory.accounting import state_tensors
from tune_lowmem.memory.predict import predict
from tune_lowmem.memory.stored import accounted
from tune_lowmem.memory.synthetic import synthetic_task
from tune_lowmem.outcome import memory_columns
from tune_lowmem.search.trainable import sweep_rows
from tune_lowmem.space import SearchSpace
from tune_lowmem.techniques.packed import PackedLayer
from tune_lowmem.train import Trainer

SPARSE = {"sparsity.density": 0.3}
BITMAP = {**SPARSE, "sparsity.storage": "bitmap"}


@pytest.mark.parametrize(
    "changes",
    [
        SPARSE,
        {**SPARSE, "sparsity.storage": "bitmap"},
        {**SPARSE, "precision": "bf16", "fused_step": "exact", "sparsity.storage": "best"},
    ],
    ids=["sparse-csr", "sparse-bitmap", "sparse-bf16-fused-best"],
)
def test_a_real_step_holds_what_the_objective_counts(changes):
    """After a real step, the distinct storages of the parameters (packed: the nonzero values),
    gradients, optimizer state and index buffers are the objective's (`predict`) model and
    optimizer parts byte for byte, and the layout's formula (`accounted` in the config's own
    layout) agrees; the paper's CSR accounting differs by the layouts' difference only."""
    config = tiny_wrn_config(**changes)
    trainer = Trainer(config, task=synthetic_task(config, torch.device("cpu")))
    batches = trainer.task.train_batches(0)
    for _ in range(2):  # the second step as every later one: the optimizer state exists
        trainer.seek(0)  # a plain step: a rewiring (after update 1 here) drops the gradients
        trainer.train_step(next(iter(batches)))
    model = trainer.model
    tensors = [*model.parameters(), *(p.grad for p in model.parameters() if p.grad is not None)]
    tensors += state_tensors(trainer.optimizer)
    tensors += [
        t for m in model.modules() if isinstance(m, PackedLayer) for t in m.index().values()
    ]
    storages = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}
    objective, counted = predict(config), accounted(config, config.sparsity.storage)
    assert sum(storages.values()) == objective.model_bytes + objective.optimizer_bytes
    assert counted == objective
    dense = Trainer(config.replace(sparsity__density=1.0), task=trainer.task).model
    assert objective.model_bytes < sum(p.nbytes for p in dense.parameters()) / 2
    csr = accounted(config, "csr")
    assert (csr == objective) == (config.sparsity.storage == "csr")


def test_a_trial_row_records_stored_beside_accounted(tmp_path):
    """The row a trial writes: the stored totals beside the accounted ones, predicted and
    measured (measured activation, with the weights and state as held); equal when dense."""
    space = SearchSpace.from_dict(
        {
            "name": "labels",
            "base": {"device": "cpu", "model": {"depth": 10, "width": 1}},
            "params": {"precision": {"type": "choice", "values": ["fp32", "fp16"]}},
            "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
            "num_samples": 1,
        }
    )
    steps = {}
    for trial_id, changes in (("sparse", BITMAP), ("dense", {})):
        config = tiny_wrn_config(**changes)
        predicted = predict(config)
        measured = MemoryReport(  # a measurement: accounted parts, its own activation and peak
            predicted.model_bytes, predicted.optimizer_bytes, 10**7, 1, "measured", 2 * 10**7
        )
        steps[trial_id] = measured.total_mb  # its own activation, the weights and state held
        memory = memory_columns(predicted, measured, accounted(config, "csr"))
        rows = sweep_rows(space, "labels")
        record = rows.row(trial_id, "completed", config.to_flat(), {}, memory)
        store.write_trial(tmp_path, record)
    rows = store.read_trials(tmp_path, "labels").set_index("trial_id")
    sparse, dense = rows.loc["sparse"], rows.loc["dense"]
    # packed: the objective is what the step stores
    assert sparse["memory.predicted_stored_total_mb"] == sparse["memory.predicted_total_mb"]
    assert sparse["memory.predicted_stored_total_mb"] == pytest.approx(
        predict(tiny_wrn_config(**BITMAP)).total_mb
    )
    # the paper's accounting beside it, sparse weights as CSR whatever the layout stored
    csr = accounted(tiny_wrn_config(**BITMAP), "csr").total_mb
    assert sparse["memory.paper_csr_total_mb"] == pytest.approx(csr)
    assert csr != sparse["memory.predicted_total_mb"]
    assert dense["memory.paper_csr_total_mb"] == dense["memory.predicted_total_mb"]
    assert sparse["memory.measured_stored_total_mb"] == sparse["memory.measured_total_mb"]
    assert sparse["memory.measured_stored_total_mb"] == pytest.approx(steps["sparse"])
    assert dense["memory.predicted_stored_total_mb"] == dense["memory.predicted_total_mb"]
    assert dense["memory.measured_stored_total_mb"] == dense["memory.measured_total_mb"]
    memory = memory_columns(predict(tiny_wrn_config()), None)
    assert memory["memory.measured_stored_total_mb"] is None  # not measured: not invented
    assert memory["memory.paper_csr_total_mb"] is None


def test_the_launch_front_labels_its_memory_columns():
    """The front `launch` and `resume` end with says how each memory column counts."""
    from tune_lowmem.search.progress import front_table

    front = pd.DataFrame(
        {
            "val_accuracy": [0.3],
            "memory.predicted_total_mb": [4.2],
            "memory.paper_csr_total_mb": [4.5],
            "checkpoint": ["none"],
        }
    )
    header = front_table(front).splitlines()[0]
    assert "memory.predicted_total_mb (accounted)" in header
    assert "memory.paper_csr_total_mb (paper's CSR accounting)" in header
    assert "val_accuracy (" not in header and "checkpoint (" not in header
