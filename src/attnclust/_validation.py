"""Input checks and conversions shared by the public functions."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["as_generator", "as_tensor", "check_temperature", "check_finite"]


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
    """Raise ``ValueError`` if ``t`` holds NaN or inf."""
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t


def check_temperature(temperature) -> float:
    """The inverse temperature ``lambda`` as a positive finite float."""
    try:
        lam = float(temperature)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}") from exc
    if not np.isfinite(lam) or lam <= 0:
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return lam
