"""The study: the paper's attention layer as a clustering and quantization operator.

Gaussian mixtures (:mod:`~attnclust.study.mixture`), the population and empirical risks of
the two-head layer (:mod:`~attnclust.study.risk`, :mod:`~attnclust.study.objectives`),
projected gradient descent on the sphere (:mod:`~attnclust.study.descent`, with its
initializations, :mod:`~attnclust.study.inits`), in-context quantization by the identity
attention (:mod:`~attnclust.study.in_context`, :mod:`~attnclust.study.quantizer`), the
metrics of the figures (:mod:`~attnclust.study.metrics`) and their experiments
(:mod:`~attnclust.study.experiments`). The layer itself (its heads, geometries, the sphere,
schedules and result types) is :mod:`attnclust.layer`, the base the study and the
clusterer share.

Only the experiment of figure 10, which runs the temperature path, imports
:mod:`attnclust.cluster`. The public names are importable from :mod:`attnclust`.
"""
