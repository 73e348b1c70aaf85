"""The end of a Euclidean fit in the hard limit: now :mod:`attnclust.kmeans`.

Kept so that the old import paths work: :func:`fit_to_hard_limit` is
:mod:`attnclust.kmeans.ending`'s, :func:`lloyd_passes` :mod:`attnclust.kmeans.passes`'s,
:func:`sample_kmeans` and :func:`cell_sums` :mod:`attnclust.kmeans.lloyd`'s,
:func:`swap_polish` :mod:`attnclust.kmeans.swap`'s; every result is a
:class:`~attnclust.kmeans.result.KMeansResult` (the old ``HardEnding``, ``HardFit`` and
``SampleKMeans`` are its names here). Its settings are read where they live (set
``attnclust.kmeans.ending.MISSED``, not this module's copy).
"""

from .kmeans.batch import KMEANS_TOL
from .kmeans.ending import FAR_ROWS, MISSED, OBJECTIVE_RTOL, REPAIRS, fit_to_hard_limit
from .kmeans.lloyd import cell_sums, sample_kmeans
from .kmeans.passes import FULL_PASS, SETTLED, lloyd_passes
from .kmeans.result import KMeansResult
from .kmeans.swap import SWAP_HEADS, SWAPS, swap_polish

HardEnding = HardFit = SampleKMeans = KMeansResult

__all__ = ["FAR_ROWS", "FULL_PASS", "KMEANS_TOL", "MISSED", "OBJECTIVE_RTOL", "REPAIRS",
           "SETTLED", "SWAPS", "SWAP_HEADS", "HardEnding", "HardFit", "SampleKMeans",
           "cell_sums", "fit_to_hard_limit", "lloyd_passes", "sample_kmeans", "swap_polish"]
