"""The picture of a temperature path: clusters and risk against the inverse temperature.

Two panels share a logarithmic ``lambda`` axis: the clusters counted (solid steps) and
the distinct heads (dotted) above, the layer's risk ``(1/n) sum_i ||x_i - T(x_i)||^2``
below; grey lines mark the splits (the grid values where the count grew), a dashed red
line the predicted first split (:func:`attnclust.cluster.annealing.predicted_first_split`).
:meth:`attnclust.TemperaturePath.plot` draws it; so does ``attnclust path``.

The picture reads only the path's curves (:class:`PathCurves`, which
:class:`~attnclust.TemperaturePath` has): it depends on what it draws, not on the module
that follows the path.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["PathCurves", "plot_path"]


class PathCurves(Protocol):
    """What :func:`plot_path` draws of a path (the fields of
    :class:`~attnclust.TemperaturePath` of these names), indexed by its grid of ``G``
    values."""

    inverse_temperatures: np.ndarray   # (G,) the grid of lambda followed
    n_clusters: np.ndarray             # (G,) clusters counted
    n_distinct: np.ndarray             # (G,) distinct heads
    risk: np.ndarray                   # (G,) the layer's risk, one head per cluster
    split_inverse_temperatures: np.ndarray   # the grid values where the count grew
    predicted_first_split: float       # 0: none predicted


def plot_path(path: PathCurves, ax=None):
    """Clusters and risk of ``path`` against ``lambda`` (log axis), splits marked.

    Parameters
    ----------
    path : TemperaturePath or PathCurves
    ax : sequence of two matplotlib axes, optional
        Where to draw the clusters and the risk; new ones (a new figure) by default.

    Returns
    -------
    matplotlib.figure.Figure
        The figure of ``ax``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt, attnclust as ac
    >>> X = ac.GaussianMixture.antipodal(d=2, sigma=0.2).sample(200, rng=0)
    >>> fig = plot_path(ac.temperature_path(X, max_clusters=2))
    >>> [a.get_ylabel() for a in fig.axes][0], fig.axes[0].get_xscale()
    ('clusters', 'log')
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(2, 1, figsize=(6.4, 5.2), sharex=True,
                               constrained_layout=True)
    fig = ax[0].figure
    lam = path.inverse_temperatures
    ax[0].step(lam, path.n_clusters, where="post", color="C0", label="clusters")
    ax[0].step(lam, path.n_distinct, where="post", color="C0", ls=":", alpha=0.7,
               label="distinct heads")
    ax[1].plot(lam, path.risk, color="C1")
    for a in ax:
        a.set_xscale("log")
        for s in path.split_inverse_temperatures:
            a.axvline(s, color="0.6", lw=0.8)
        if path.predicted_first_split > 0:
            a.axvline(path.predicted_first_split, color="C3", ls="--", lw=1.0)
    ax[0].plot([], [], color="C3", ls="--", label="predicted first split")
    ax[0].set_ylabel("clusters")
    ax[0].legend(loc="upper left", fontsize=8)
    ax[1].set_ylabel(r"risk $\frac{1}{n}\sum_i \|x_i - T(x_i)\|^2$")
    ax[1].set_xlabel(r"inverse temperature $\lambda$")
    return fig
