"""Input checks shared by the library: every failure is a ``ValueError`` naming the argument."""

from __future__ import annotations

import numpy as np


def finite_array(name: str, value, ndim: int | None = None) -> np.ndarray:
    """Return ``value`` as a float64 array, rejecting NaN/inf and (optionally) a wrong rank."""
    arr = np.asarray(value, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def unit_interval(name: str, arr: np.ndarray) -> np.ndarray:
    if np.any(arr < 0.0) or np.any(arr > 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got values in [{arr.min():g}, {arr.max():g}]")
    return arr


def probability_vector(name: str, value, size: int | None = None, atol: float = 1e-9) -> np.ndarray:
    """A 1-d array of non-negative entries that sum to one."""
    arr = finite_array(name, value, ndim=1)
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got {arr.shape[0]}")
    if np.any(arr < 0.0):
        raise ValueError(f"{name} must be non-negative")
    if abs(arr.sum() - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1 (got {arr.sum():.12g})")
    return arr


def same_shape(name: str, arr: np.ndarray, shape: tuple[int, ...], other: str) -> None:
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} to match {other}, got {arr.shape}")


def positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def group_run(est, group_size, batch_size) -> None:
    """Check G and B for an estimator: integers, B >= 1, G >= the estimator's minimum."""
    positive_int("batch_size", batch_size, 1)
    positive_int("group_size", group_size, 1)
    if group_size < est.min_group_size:
        raise ValueError(
            f"group_size must be >= {est.min_group_size} for estimator {est.name!r} "
            f"(a leave-one-out or group baseline needs G >= 2), got {group_size}"
        )
