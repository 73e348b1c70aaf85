"""The attention layer's base, shared by the clusterer and the study: the heads' geometry
(:mod:`~attnclust.layer.geometry`), the heads (:mod:`~attnclust.layer.heads`), the unit
sphere (:mod:`~attnclust.layer.sphere`), schedules of ``lambda`` and step sizes
(:mod:`~attnclust.layer.schedules`) and the solvers' result types
(:mod:`~attnclust.layer.results`). It imports neither :mod:`attnclust.cluster` nor
:mod:`attnclust.study`."""
