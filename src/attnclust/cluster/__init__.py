"""The clusterer: the layer of :mod:`attnclust.study` as a scikit-learn estimator.

:class:`~attnclust.AttentionClustering` (:mod:`~attnclust.cluster.clustering`) resolves
its settings once into a plan (:mod:`~attnclust.cluster.plan`, with the covariance types
of :mod:`~attnclust.cluster.mixture.covariance`), prepares the working rows
(:mod:`~attnclust.cluster.rows`), warm starts (:mod:`~attnclust.cluster.warm_start`) and
fits: the k-means engine of the layer's hard limit (:mod:`~attnclust.cluster.kmeans`),
fixed-point steps (:mod:`~attnclust.cluster.fixed_point`), shaped heads
(:mod:`~attnclust.cluster.mixture.shaped`, :mod:`~attnclust.cluster.mixture.tempered`), the
temperature path and the choice of K (:mod:`~attnclust.cluster.annealing`,
:mod:`~attnclust.cluster.choice.plateaus`, :mod:`~attnclust.cluster.choice.path_choice`), streamed
and data-parallel fits (:mod:`~attnclust.cluster.streaming`,
:mod:`~attnclust.cluster.distributed`, :mod:`~attnclust.cluster.communicator`).

The public names are importable from :mod:`attnclust`; the tuning settings of a fit's
choices, :class:`~attnclust.cluster.settings.FitSettings` and
:class:`~attnclust.cluster.settings.MergeSettings`, also from here.
"""

from .settings import FitSettings, MergeSettings

__all__ = ["FitSettings", "MergeSettings"]
