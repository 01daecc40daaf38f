"""The independent measurement (`memory.allocations`): the replay of allocator reports, and a
real step of the user's MLP task against figures counted by hand."""

import pytest

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.allocations import _replay, _temporaries, measure_allocations

FEATURES, HIDDEN, CLASSES, BATCH = 8, 512, 3, 256
FP32 = 4


def events(*reports: tuple[float, int, int]) -> list[tuple[float, int, int, int, int]]:
    """(time, address, bytes) reports as the trace gives them, on one thread."""
    return [
        (time, index, 1, address, nbytes) for index, (time, address, nbytes) in enumerate(reports)
    ]


def test_replay_counts_live_bytes_and_leaves_out_what_the_step_keeps():
    # before the step (t < 10): a weight at 1 (100 B) and a freed temporary at 2; in the step: an
    # activation at 3 (40 B); a gradient at 4 (100 B) that the step keeps; the activation freed;
    # a temporary at 5 (30 B) freed
    reports = events(
        (1, 1, 100), (2, 2, 50), (3, 2, -50), (10, 3, 40), (11, 4, 100), (12, 3, -40), (13, 5, 30)
    )
    reports += events((14, 5, -30))
    for i, report in enumerate(reports):
        reports[i] = (report[0], i, *report[2:])
    replay = _replay(reports, start=10, end=20, held={1, 4})
    assert replay == {"before": 100, "peak": 240, "activation": 40, "events": 5}


def test_replay_counts_a_weight_freed_in_the_step():
    replay = _replay(events((1, 1, 100), (10, 1, -100), (11, 2, 60)), start=10, end=20, held=set())
    assert replay["before"] == 100 and replay["peak"] == 100 and replay["activation"] == 0


def test_a_temporary_is_freed_inside_the_outermost_operator_that_made_it():
    # an operator from 10 to 20 makes a 70 B temporary (freed at 15) and its 40 B output (freed
    # at 30, after the operator); a nested operator's allocation is still the outer one's
    reports = events((11, 1, 70), (12, 2, 40), (15, 1, -70), (30, 2, -40))
    temporaries = _temporaries(reports, {1: [(10.0, 20.0), (25.0, 26.0)]})
    assert temporaries == {0}
    without = _replay(reports, 5, 40, held=set(), skip=temporaries)
    assert without["activation"] == 40 and _replay(reports, 5, 40, held=set())["activation"] == 110


def test_a_real_step_of_an_mlp_against_its_tensors_counted_by_hand():
    config = TrialConfig.from_dict(
        {
            "task": "tests.tiny_task:TinyBlobs",
            "device": "cpu",
            "model.hidden": HIDDEN,
            "schedule.batch_size": BATCH,
        }
    )
    measured = measure_allocations(config)
    weights = FEATURES * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES
    assert measured.model_bytes == weights * FP32
    assert measured.optimizer_bytes == 2 * weights * FP32  # gradients and SGD momentum
    # the peak is the second ReLU's backward: the two stored ReLU outputs, the gradient w.r.t.
    # the second and the ReLU backward's result (batch x hidden each), beside which only tensors
    # of the logits' size are alive
    peak = 4 * BATCH * HIDDEN * FP32
    assert peak <= measured.activation_bytes <= peak + 4 * BATCH * CLASSES * FP32
    assert measured.batch_bytes == BATCH * FEATURES * FP32 + BATCH * 8  # inputs, int64 labels
    assert measured.before_bytes >= (weights * 2 * FP32) + measured.batch_bytes
    assert measured.peak_bytes >= measured.before_bytes + measured.activation_bytes


def test_the_prediction_agrees_with_the_allocator_on_the_mlp():
    from tune_lowmem.memory.predict import heap_object_bytes, predict

    config = TrialConfig.from_dict(
        {"task": "tests.tiny_task:TinyBlobs", "device": "cpu", "model.hidden": 256}
    )
    predicted = predict(config).total_bytes - heap_object_bytes(config)
    assert measure_allocations(config).total_bytes == pytest.approx(predicted, rel=0.01)
