"""When a fit's clusters cannot be trusted: :class:`DegenerateFitWarning` and its checks,
and where a fit's warnings are shown (:func:`user_stacklevel`: at the user's line).

A fit of :class:`~attnclust.AttentionClustering` ends with three checks, on statistics
summed over every rank's rows (so that every rank warns alike):

- a *dead head*: ``N_h = #{i : argmax_g a_g(x_i) = h} = 0``, fewer clusters than asked;
- ``lambda`` *at its cap*: the warm start's ``s^2`` was at its floor (clusters without
  spread, e.g. duplicated rows), so ``lambda = 1 / floor``;
- *nearly uniform attention*: the mean largest weight ``(1/n) sum_i max_h a_h(x_i)`` is
  below ``1/K + _UNIFORM (1 - 1/K)``; the risk then pins down only the mean of the heads
  (not reported at the cap, where the attention is as sharp as it gets and coinciding
  heads, reported as dead, are the cause).

With sample weights, ``N_h`` and ``n`` are sums of weights (a head that wins only rows of
weight zero wins nothing).

Notation
--------
=============  ==============  =============================================
paper          code            meaning
=============  ==============  =============================================
``K``          ``len(sizes)``  number of heads
``N_h``        ``sizes[h]``    rows won by head ``h``
``lambda``     ``shown``       inverse temperature (as shown to the user)
=============  ==============  =============================================
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

__all__ = ["DegenerateFitWarning", "warn_capped", "warn_if_degenerate", "warn_if_empty",
           "user_stacklevel"]

_UNIFORM = 0.1            # mean max attention below 1/K + _UNIFORM (1 - 1/K): "uniform"


class DegenerateFitWarning(ConvergenceWarning):
    """A fit ended somewhere its clusters cannot be trusted (dead head, degenerate lambda)."""


def warn_capped(inverse_temperature: float, *, where: str = "") -> None:
    """The :class:`DegenerateFitWarning` of a ``lambda`` at its cap (``where``: which rows
    set it, when not all of them)."""
    warnings.warn(f"the clusters{where} have (nearly) no spread, so "
                  f"lambda={inverse_temperature:.3g} is at its cap (1e12 over the data's "
                  "mean squared spread, or 1e12 when the rows are all equal; 1e6 in "
                  "float32); duplicated rows?", DegenerateFitWarning, stacklevel=user_stacklevel())


def warn_if_empty(sizes: np.ndarray, *, what: str = "head(s)") -> None:
    """A :class:`DegenerateFitWarning` where an item of ``sizes`` ``(K,)`` (the rows, or
    their weights, each head or cluster wins: ``what``) wins no row."""
    dead = np.flatnonzero(sizes == 0)
    if dead.size:
        warnings.warn(f"{what} {dead.tolist()} win no row: the fit found fewer than "
                      f"{len(sizes)} clusters; try another random_state or init, or fewer "
                      "clusters", DegenerateFitWarning, stacklevel=user_stacklevel())


def warn_if_degenerate(sizes: np.ndarray, sharpness: float, *, capped: bool,
                       inverse_temperature: float) -> None:
    """A :class:`DegenerateFitWarning` for each check of the module docstring that fails.

    ``sizes`` are the rows won by each head ``(K,)`` (or their weights), ``sharpness`` the
    (weighted) sum over rows of the largest attention weight, ``capped`` whether ``lambda``
    is at its cap.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_degenerate(np.array([10.0, 0.0]), 5.2, capped=False,
    ...                        inverse_temperature=0.5)
    >>> [str(w.message)[:24] for w in caught]
    ['head(s) [1] win no row: ', 'the attention is nearly ']
    """
    K, n = len(sizes), float(sizes.sum())
    shown = f"lambda={inverse_temperature:.3g}"
    warn_if_empty(sizes)
    if capped:
        warn_capped(inverse_temperature)
    # at the cap the attention is as sharp as it gets: heads that share their rows
    # (reported above as winning none) are the cause, not a small lambda
    if not capped and K > 1 and sharpness / n < 1.0 / K + _UNIFORM * (1.0 - 1.0 / K):
        warnings.warn(f"the attention is nearly uniform at {shown} (mean largest weight "
                      f"{sharpness / n:.3f}, uniform {1 / K:.3f}): the risk then pins down "
                      "only the mean of the heads; raise inverse_temperature or use 'auto'",
                      DegenerateFitWarning, stacklevel=user_stacklevel())


def user_stacklevel() -> int:
    """The ``stacklevel`` that shows a warning, warned by the caller of this function, at
    the line that called into the package: its first caller outside ``attnclust`` and
    scikit-learn (a fit's checks run many frames deep, ``fit_predict`` adds one, and
    scikit-learn's ``fit_transform`` calls ``fit``). Read from the stack, not held in a
    ``catch_warnings`` block, which threads (ranks of a fit) would share.

    Examples
    --------
    Called from code outside the package, the warning is shown at that code's own line:

    >>> user = {"__name__": "user_code", "user_stacklevel": user_stacklevel}
    >>> exec("def level(): return user_stacklevel()", user)
    >>> user["level"]()
    1

    (``tests/test_clustering.py`` checks a fit's warnings against the test's own file.)
    """
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in (
            "attnclust", "sklearn"):
        frame, level = frame.f_back, level + 1
    return level
