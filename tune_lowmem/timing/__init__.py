"""The time prediction: a configuration's seconds per update, per evaluation and per epoch on the
device it trains on, before it trains (`predict_time`, answering a `TimePrediction`), from the
dry run that predicts its memory and a probe of the device's own kernels (docs/time.md)."""

from .predict import TimePrediction, predict_time

__all__ = ["TimePrediction", "predict_time"]
