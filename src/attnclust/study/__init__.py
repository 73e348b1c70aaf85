"""The study: the paper's attention layer as a clustering and quantization operator.

Gaussian mixtures (:mod:`~attnclust.study.mixture`), the two-head layer and its heads
(:mod:`~attnclust.study.heads`, :mod:`~attnclust.study.sphere`,
:mod:`~attnclust.study.geometry`), its population and empirical risks
(:mod:`~attnclust.study.risk`, :mod:`~attnclust.study.objectives`), projected gradient
descent on the sphere (:mod:`~attnclust.study.descent`, with its schedules and
initializations), in-context quantization by the identity attention
(:mod:`~attnclust.study.in_context`, :mod:`~attnclust.study.quantizer`), the metrics of
the figures (:mod:`~attnclust.study.metrics`) and their experiments
(:mod:`~attnclust.study.experiments`).

The clusterer is built on the study, not the other way round: only the experiment of
figure 10, which runs the temperature path, imports :mod:`attnclust.cluster`. The public
names are importable from :mod:`attnclust`.
"""
