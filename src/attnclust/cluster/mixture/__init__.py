"""The mixture engine of shaped heads: the covariance types
(:mod:`~attnclust.cluster.mixture.covariance`), one EM loop over rows read whole
(:mod:`~attnclust.cluster.mixture.em`) or over chunks of torch rows, tempered
(:mod:`~attnclust.cluster.mixture.tempered`), the layer of shaped heads
(:mod:`~attnclust.cluster.mixture.shaped`), and what is built on them: the choice of the
heads' shape (:mod:`~attnclust.cluster.mixture.shape_choice`, its candidates in
:mod:`~attnclust.cluster.mixture.candidates`, its collapse guard in
:mod:`~attnclust.cluster.mixture.valley`), the noise head
(:mod:`~attnclust.cluster.mixture.noise_head`) and the estimator's likelihood
(:mod:`~attnclust.cluster.mixture.likelihood`)."""
