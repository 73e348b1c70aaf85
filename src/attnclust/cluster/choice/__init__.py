"""The choice of the number of clusters: by the BIC of the shaped layer's mixtures with a
test for no structure (:mod:`~attnclust.cluster.choice.k_choice`, ``n_clusters="auto"``),
and by the plateaus of the temperature path (:mod:`~attnclust.cluster.choice.plateaus`,
:mod:`~attnclust.cluster.choice.path_choice`)."""
