"""Pictures of fits, apart from the library's core (matplotlib is imported when one is
drawn): the clusters of a fit (:mod:`~attnclust.plotting.clusters`) and a temperature
path (:mod:`~attnclust.plotting.path`)."""
