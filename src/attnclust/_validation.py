"""Input checks and conversions shared by the public functions."""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "as_generator",
    "as_tensor",
    "check_temperature",
    "check_finite",
    "check_int",
    "check_nonnegative",
]


def as_generator(rng) -> np.random.Generator:
    """A NumPy generator from ``None``, an int seed, a ``SeedSequence`` or a generator."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(rng)
    raise ValueError(f"rng must be None, an int or a numpy Generator, got {type(rng).__name__}")


def as_tensor(x, *, name: str = "x", dtype=None, device=None) -> torch.Tensor:
    """Convert array-like ``x`` to a floating tensor, keeping a tensor's dtype and device.

    NumPy arrays and lists become float64 unless ``dtype`` says otherwise.
    """
    if isinstance(x, torch.Tensor):
        t = x
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype() if dtype is None else dtype)
    else:
        try:
            # copies only read-only or non-contiguous arrays, which torch cannot wrap
            t = torch.from_numpy(np.require(np.asarray(x, dtype=np.float64), requirements="CW"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be numeric, got {type(x).__name__}") from exc
    if dtype is not None or device is not None:
        t = t.to(dtype=dtype or t.dtype, device=device or t.device)
    return t


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or inf, naming the first such index.

    Examples
    --------
    >>> check_finite(torch.tensor([[1.0, float("nan")]]), "X")
    Traceback (most recent call last):
    ...
    ValueError: X contains NaN or inf (first at index (0, 1): nan)
    """
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        flat = int(torch.nonzero(~finite.reshape(-1))[0, 0])
        index = tuple(int(i) for i in np.unravel_index(flat, tuple(t.shape)))
        where = index[0] if len(index) == 1 else index
        value = float(t.reshape(-1)[flat])
        raise ValueError(f"{name} contains NaN or inf (first at index {where}: {value})")
    return t


def check_int(value, name: str, minimum: int = 0) -> int:
    """``value`` as an ``int >= minimum``; booleans and non-integers are refused.

    Examples
    --------
    >>> check_int(3, "n", 1)
    3
    >>> check_int(True, "max_iter", 1)
    Traceback (most recent call last):
    ...
    ValueError: max_iter must be an integer >= 1, got True
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_nonnegative(value, name: str) -> float:
    """``value`` as a finite ``float >= 0``; booleans and non-numbers are refused.

    Examples
    --------
    >>> check_nonnegative(0.5, "rho")
    0.5
    >>> check_nonnegative("a", "rho")
    Traceback (most recent call last):
    ...
    ValueError: rho must be a finite number >= 0, got 'a'
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_temperature(temperature) -> float:
    """The inverse temperature ``lambda`` as a positive finite float.

    Called on every attention evaluation, so it is a float conversion and a comparison.

    Examples
    --------
    >>> check_temperature(2)
    2.0
    """
    if isinstance(temperature, bool):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    try:
        lam = float(temperature)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}") from exc
    if not 0.0 < lam < math.inf:  # also false for NaN
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return lam
