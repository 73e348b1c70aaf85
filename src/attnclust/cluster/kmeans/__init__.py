"""The k-means engine: the layer's hard limit, written once.

As ``lambda -> infinity`` the attention of the K-head layer becomes the indicator of the
nearest head and its fixed-point step becomes Lloyd's step, which never increases the
k-means objective

    R_inf(mu) = sum_i w_i min_h ||x_i - mu_h||^2 / sum_i w_i .

Every k-means of the package runs here, one concept a module:

=================  ==============================================================
module             what
=================  ==============================================================
``result``         :class:`KMeansResult`, the record of a run; its objective
                   recomputed from the final heads and labels in one pass (the
                   steps over all rows: their sums where accurate enough)
``seeding``        greedy k-means++ (:func:`kmeanspp_batch`), several runs at once
``batch``          Lloyd's steps of several runs at once on a sample (NumPy), the
                   best of ``n_init`` seedings (:func:`best_of_seedings`)
``lloyd``          Lloyd's steps in torch: any geometry (:func:`hard_lloyd`), the
                   sample's k-means (:func:`sample_kmeans`), :func:`cell_sums`
``passes``         Lloyd's steps over all rows with Hamerly's bounds and a sum over
                   ranks (:func:`lloyd_passes`)
``swap``           the single swap (:func:`single_swap`) and :func:`swap_polish`
``ending``         the estimator's end in the hard limit: swaps, steps over all
                   rows, the far-row repair (:func:`fit_to_hard_limit`)
=================  ==============================================================

Lloyd's steps have one signature whatever holds the rows (the row backend)::

    lloyd(rows, heads, max_iter, *, tol=0.0, weights=None, ...) -> KMeansResult

=====================  =======================  ========================================
function               ``rows``                 what differs beyond reading the rows
=====================  =======================  ========================================
:func:`lloyd_batch`    ndarray ``(n, d)``       several runs at once (``heads`` ``(R, K,
                                                d)``, a leading axis of runs in the result);
                                                Euclidean; the objective from the last
                                                assignment's scores (to pick the best run)
:func:`hard_lloyd`     Tensor ``(n, d)``        any geometry (``geometry=``: on the
                                                sphere, spherical k-means); one run
:func:`lloyd_passes`   :class:`RowReader`       rows read in chunks over ranks (``reduce``);
                                                Hamerly's bounds (only doubted rows read
                                                again); the ``rtol`` stop; the objective
                                                carried by the steps' sums
=====================  =======================  ========================================

Each stops at ``max_iter`` steps, at a step that changes no label, or at one that moves
the heads by a sum of squares of at most ``tol`` (``lloyd_passes`` stops before taking
that step: its labels are those of its last heads without another read).

The k-means runs above these steps (:func:`best_of_seedings`, :func:`sample_kmeans`,
:func:`swap_polish`, :func:`fit_to_hard_limit`) take scikit-learn's relative ``tol``
(default ``KMEANS_TOL``, ``1e-4`` times the rows' mean variance per feature) and give the
steps its absolute value.

The notation is :mod:`attnclust.cluster.kmeans.result`'s (heads ``mu_h``, labels ``z_i``, weights
``w_i``, objective ``R_inf``).

Examples
--------
>>> import numpy as np
>>> X = np.array([[0.0], [0.2], [3.0], [3.4]])
>>> res = best_of_seedings(X, 2, 3, np.random.default_rng(0))
>>> sorted(res.heads[:, 0].round(3).tolist()), round(res.objective, 3)
([0.1, 3.2], 0.025)
"""

from .batch import KMEANS_TOL, best_of_seedings, lloyd_batch
from .ending import FAR_ROWS, MISSED, OBJECTIVE_RTOL, REPAIRS, fit_to_hard_limit
from .lloyd import cell_sums, hard_labels, hard_lloyd, sample_kmeans
from .passes import FULL_PASS, RowReader, lloyd_passes
from .result import KMeansHistory, KMeansResult, objective
from .seeding import kmeanspp_batch
from .swap import SWAP_HEADS, SWAPS, Swap, nearest_two, single_swap, swap_polish

__all__ = ["FAR_ROWS", "FULL_PASS", "KMEANS_TOL", "MISSED", "OBJECTIVE_RTOL", "REPAIRS",
           "SWAPS", "SWAP_HEADS", "KMeansHistory", "KMeansResult", "RowReader", "Swap",
           "best_of_seedings", "cell_sums", "fit_to_hard_limit", "hard_labels", "hard_lloyd",
           "kmeanspp_batch", "lloyd_batch", "lloyd_passes", "nearest_two", "objective",
           "sample_kmeans", "single_swap", "swap_polish"]
