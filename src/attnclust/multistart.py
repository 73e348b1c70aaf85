"""k-means from several k-means++ seedings at once: now :mod:`attnclust.kmeans`.

Kept so that the old import paths work: :func:`kmeanspp_batch` is
:mod:`attnclust.kmeans.seeding`'s, :func:`lloyd_batch` and :func:`best_of_seedings`
:mod:`attnclust.kmeans.batch`'s; their results are
:class:`~attnclust.kmeans.result.KMeansResult` (the old ``Restarts`` and ``Runs``).
"""

from .kmeans.batch import best_of_seedings, lloyd_batch
from .kmeans.result import KMeansResult
from .kmeans.seeding import kmeanspp_batch

Restarts = Runs = KMeansResult

__all__ = ["Restarts", "Runs", "best_of_seedings", "kmeanspp_batch", "lloyd_batch"]
