"""A small exact Gaussian process (Matern 5/2, one length scale per input, fitted noise).

Why here: the known-memory sampler models one objective over a few dozen points, and Optuna's
own GP lives in private modules. Inputs are in [0, 1]; the targets are standardised inside.
The hyperparameters maximise the log marginal likelihood (L-BFGS-B from a few starts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

LOG_LENGTH = (np.log(0.05), np.log(20.0))
LOG_NOISE = (np.log(1e-4), np.log(1.0))  # of the standardised targets' variance
LOG_SIGNAL = (np.log(0.05), np.log(20.0))


def matern52(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    scaled = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) / lengths) ** 2, 0.0).sum(axis=-1))
    root5 = np.sqrt(5.0) * scaled
    return (1.0 + root5 + root5**2 / 3.0) * np.exp(-root5)


@dataclass
class GaussianProcess:
    """A fitted GP: `predict` gives the latent function's mean and standard deviation."""

    inputs: np.ndarray
    standard: np.ndarray  # the targets, standardised
    theta: np.ndarray  # log length scales, log signal variance, log noise variance
    shift: float
    scale: float

    def __post_init__(self) -> None:
        self.lengths, self.signal = np.exp(self.theta[:-2]), float(np.exp(self.theta[-2]))
        self.factor = cho_factor(gram(self.inputs, self.theta), lower=True)
        self.weights = cho_solve(self.factor, self.standard)

    @classmethod
    def fit(
        cls, inputs: np.ndarray, targets: np.ndarray, rng: np.random.Generator, starts: int = 3
    ) -> GaussianProcess:
        inputs = np.asarray(inputs, float)
        shift = float(np.mean(targets))
        scale = float(np.std(targets)) or 1.0
        standard = (np.asarray(targets, float) - shift) / scale
        bounds = [LOG_LENGTH] * inputs.shape[1] + [LOG_SIGNAL, LOG_NOISE]
        best = None
        for start in range(starts):
            theta = np.array([*[np.log(0.5)] * inputs.shape[1], 0.0, np.log(0.05)])
            if start:
                theta = np.array([rng.uniform(low, high) for low, high in bounds])
            found = minimize(
                negative_log_likelihood,
                theta,
                args=(inputs, standard),
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
            )
            if best is None or found.fun < best.fun:
                best = found
        return cls(inputs, standard, best.x, shift, scale)

    def with_points(self, inputs: np.ndarray, targets: np.ndarray) -> GaussianProcess:
        """The same hyperparameters conditioned on more points (pending trials at their mean)."""
        standard = (np.asarray(targets, float) - self.shift) / self.scale
        return GaussianProcess(
            np.vstack([self.inputs, inputs]),
            np.concatenate([self.standard, standard]),
            self.theta,
            self.shift,
            self.scale,
        )

    def predict(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross = self.signal * matern52(np.asarray(inputs, float), self.inputs, self.lengths)
        mean = cross @ self.weights
        solved = cho_solve(self.factor, cross.T)
        variance = np.maximum(self.signal - np.sum(cross * solved.T, axis=1), 1e-12)
        return self.shift + self.scale * mean, self.scale * np.sqrt(variance)


def gram(inputs: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The kernel matrix of the targets (latent covariance plus noise)."""
    lengths, signal, noise = np.exp(theta[:-2]), np.exp(theta[-2]), np.exp(theta[-1])
    return signal * matern52(inputs, inputs, lengths) + (noise + 1e-8) * np.eye(len(inputs))


def negative_log_likelihood(
    theta: np.ndarray, inputs: np.ndarray, standard: np.ndarray
) -> tuple[float, np.ndarray]:
    """Up to a constant, with its gradient in theta (Rasmussen and Williams, eq. 5.9)."""
    lengths, signal, noise = np.exp(theta[:-2]), np.exp(theta[-2]), np.exp(theta[-1])
    squares = ((inputs[:, None, :] - inputs[None, :, :]) / lengths) ** 2  # n x n x d
    root5 = np.sqrt(5.0 * squares.sum(axis=-1))
    decay = np.exp(-root5)
    latent = signal * (1.0 + root5 + root5**2 / 3.0) * decay
    try:
        factor = cho_factor(latent + (noise + 1e-8) * np.eye(len(inputs)), lower=True)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    alpha = cho_solve(factor, standard)
    inverse = cho_solve(factor, np.eye(len(inputs)))
    outer = np.outer(alpha, alpha) - inverse
    # d latent / d log length_d = signal * 5/3 * (1 + root5) * exp(-root5) * squares_d
    slope = signal * (5.0 / 3.0) * (1.0 + root5) * decay
    gradient = np.concatenate(
        [
            0.5 * np.einsum("ij,ijd->d", outer * slope, squares),
            [0.5 * np.sum(outer * latent), 0.5 * noise * np.trace(outer)],
        ]
    )
    value = 0.5 * standard @ alpha + np.log(np.diag(factor[0])).sum()
    return float(value), -gradient
