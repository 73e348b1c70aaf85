"""The predictions of a fitted K-head layer: attention, labels, outputs, distances.

What :class:`~attnclust.AttentionClustering` answers once fitted, read off its fitted
attributes (``cluster_centers_``, ``inverse_temperature_``, the shaped heads' arrays) and
its resolved :class:`~attnclust.cluster.plan.FitPlan` (the geometry, the heads' shape,
the preprocessing), on rows preprocessed as in ``fit`` and read in blocks of about 2 MB:

    a_h(x)  = softmax_h( logits_h(x) )          predict_proba (merged heads: summed per cluster)
    z(x)    = argmax_h logits_h(x)              predict (-1: the noise head's row)
    T_mu(x) = sum_h a_h(x) mu_h                 layer_output (merged: over the m heads)
    ||x - T_mu(x)||^2                           squared_errors (the empirical risk's terms)
    d_h(x)  = ||x - mu_h||                      transform (KMeans.transform's)

The logits are computed in float64 whatever the data's dtype; the outputs come back in
the dtype of the rows given. The notation is the estimator's
(:mod:`attnclust.cluster.clustering`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..layer.heads import softmax_heads
from .estimator_fits import shaped_log_joint
from .merge import cluster_argmax
from .mixture.likelihood import spherical_log_density, squared_distances
from .mixture.noise_head import NOISE_LABEL
from .rows import chunk_rows, fit_threads

__all__ = ["LayerPredictionsMixin", "MergedHeadsMixin"]


class MergedHeadsMixin:
    """The logits and the likelihood of a fit whose heads were merged into clusters
    (``merge_heads_``, :mod:`attnclust.cluster.merge`); other fits go to the next class
    (:class:`LayerPredictionsMixin`'s logits, the likelihood mixin's mixture)."""

    @property
    def _heads_merged(self) -> bool:
        """Whether the fit merged its heads into clusters (``merge_heads_``)."""
        return bool(getattr(self, "merge_heads_", False))

    def _heads_and_logits(self, X: torch.Tensor, order=slice(None)):
        """The merged heads ``(m, d)`` (in ``order``) and their logits of the preprocessed
        rows ``X`` ``(n, m)``."""
        heads = torch.as_tensor(np.asarray(self.heads_, dtype=np.float64)[order],
                                device=X.device)
        return heads, self._plan.geometry.precise_logits(X, heads, self.inverse_temperature_)

    def _merged_logits(self, X: torch.Tensor) -> torch.Tensor:
        """A cluster's logit: the log-sum-exp of its heads' logits, so that its attention
        is the sum of theirs."""
        logits = self._heads_and_logits(X)[1]
        labels = torch.as_tensor(self.head_labels_, device=X.device)
        return torch.stack([torch.logsumexp(logits[:, labels == c], 1)
                            for c in range(len(self.cluster_centers_))], 1)

    def _merged_labels(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each preprocessed row's top head logit and its cluster of largest summed
        attention (the argmax of :meth:`_merged_logits`, with no exponential on most rows:
        :func:`~attnclust.cluster.merge.cluster_argmax`), both ``(n,)``."""
        order = np.argsort(self.head_labels_, kind="stable")     # heads grouped by cluster
        logits = self._heads_and_logits(X, order)[1]
        labels, top = cluster_argmax(logits.cpu().numpy(), np.bincount(
            self.head_labels_, minlength=len(self.cluster_centers_)))
        return torch.from_numpy(top), torch.from_numpy(labels)

    def _outputs(self, Xp) -> torch.Tensor:
        """``T_mu(x)`` of the preprocessed rows ``Xp``; merged: of the ``m`` heads, the
        layer the fit merged (the clusters' centres are their rows' means: a ring's is its
        middle, which no row is near)."""
        if not self._heads_merged:
            return super()._outputs(Xp)
        X = torch.as_tensor(np.ascontiguousarray(Xp, dtype=np.float64),
                            device=self._plan.device)
        with fit_threads(self._plan.device):
            heads, logits = self._heads_and_logits(X)
            return softmax_heads(logits) @ heads

    def _log_density(self, X: torch.Tensor) -> torch.Tensor:
        """``log p(x)`` of preprocessed rows; merged: the equal-weight mixture of
        ``N(mu_h, I / lambda)`` over every head."""
        if not self._heads_merged:
            return super()._log_density(X)
        heads = torch.as_tensor(np.asarray(self.heads_, dtype=np.float64), device=X.device)
        return spherical_log_density(X, heads, self.inverse_temperature_)

    def _n_parameters(self) -> int:
        """Free parameters of the fitted mixture; merged: ``m d`` means and ``lambda``."""
        if not self._heads_merged:
            return super()._n_parameters()
        return int(self.heads_.size) + 1


class LayerPredictionsMixin(TransformerMixin):
    """``predict_proba``, ``predict``, ``layer_output`` and ``transform`` of a fitted
    estimator (see the module docstring); it reads the estimator's ``_validate``,
    ``_plan`` and fitted attributes. A ``TransformerMixin``, so that scikit-learn's
    ``set_output`` wraps the ``transform`` defined here (it wraps a class's own).

    Examples
    --------
    The label is the most-attended head, the output the attention's mean of the heads,
    and the nearest head the most attended one (Euclidean heads):

    >>> import numpy as np
    >>> from attnclust import AttentionClustering
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    >>> est = AttentionClustering(2, covariance_type="spherical", random_state=0).fit(X)
    >>> A = est.predict_proba(X)
    >>> A.shape, bool(np.all(A.argmax(1) == est.predict(X)))
    ((4, 2), True)
    >>> bool(np.allclose(est.layer_output(X), A @ est.cluster_centers_))
    True
    >>> D = est.transform(X)
    >>> D.shape, bool(np.all(D.argmin(1) == est.predict(X)))
    ((4, 2), True)
    """

    def _logits(self, Xp: np.ndarray, *, top: bool = False):
        """Attention logits ``(n, K)`` of preprocessed rows, in float64 (the geometry's
        precise ones: for Euclidean heads, from the differences ``x - mu_h``); ``top``:
        only each row's highest logit and its head, both ``(n,)``."""
        plan, heads = self._plan, self._heads64()
        X = torch.as_tensor(np.ascontiguousarray(Xp, dtype=np.float64), device=plan.device)
        with fit_threads(plan.device):
            if plan.covariance.shaped:
                logits = shaped_log_joint(X, self, plan.covariance)
            elif self._heads_merged:
                if top and X.device.type == "cpu":      # a device keeps its logits there
                    return self._merged_labels(X)
                logits = self._merged_logits(X)
            else:
                logits = plan.geometry.precise_logits(X, heads, self.inverse_temperature_)
        return logits.max(1) if top else logits

    def _by_chunks(self, X, fn, *, keep_dtype: bool = False) -> np.ndarray:
        """``fn(preprocessed rows)`` on blocks of about 2 MB of rows (their float64 copies
        and ``(rows, K)`` weights stay small however wide the data), concatenated
        (``keep_dtype``: in the dtype of ``X``)."""
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        step = chunk_rows(None, X.shape[1], len(self.cluster_centers_))
        center = (self.mean_, self.scale_)

        def block(s: int) -> np.ndarray:
            out = fn(self._plan.preprocess(X[s:s + step], center, offset=s))
            if keep_dtype:              # a float32 distance past its range: refused too
                with np.errstate(over="ignore"):
                    out = out.astype(X.dtype, copy=False)
            return self._finite(out, X, s)
        return np.concatenate([block(s) for s in range(0, X.shape[0], step)])

    @staticmethod
    def _finite(out: np.ndarray, X: np.ndarray, offset: int) -> np.ndarray:
        """A block's outputs ``out``, unless a row's are not finite (a row so far from the
        heads that its distance or its logits overflow float64, or ``X``'s float32 where
        the outputs are kept in it: a distance, a density, an attention or, from
        :meth:`predict`, a label of NaN or inf): then a ``ValueError`` naming the row
        (``offset``: the block's first row in ``X``)."""
        if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
            i = int(np.flatnonzero(~np.isfinite(out.reshape(len(out), -1)).all(1))[0])
            kept = "" if X.dtype == np.float64 else f" or X's {X.dtype}"
            raise ValueError(f"row {offset + i} of X is too far from the fitted heads to "
                             "score: its distance to them (or its square), or its logits, "
                             f"overflow float64{kept} (entries up to "
                             f"{float(np.abs(X[offset + i]).max()):.3g})")
        return out

    def predict_proba(self, X) -> np.ndarray:
        """Attention weights ``a_h(x)``, shape (n_samples, n_clusters), rows sum to one
        (with ``noise_head=True``: over the ``K`` heads, given that the row is not noise);
        in the dtype of ``X``."""
        return self._by_chunks(X, lambda Xp: softmax_heads(self._logits(Xp)).cpu().numpy(),
                               keep_dtype=True)

    def predict(self, X) -> np.ndarray:
        """Index of the most-attended head, ``argmax_h a_h(x)``: of the highest logit (at a
        small ``lambda`` the weights of near heads are equal to rounding, their logits
        not). With ``noise_head=True``: ``-1`` where the background head's log-joint is
        the highest."""
        def labels(Xp):         # float: a row whose logits overflow is NaN, and refused
            top, best = self._logits(Xp, top=True)
            if self._plan.noise_head:           # -inf: no head explains the row, noise
                best[top < self._noise_log_joint()] = NOISE_LABEL
            out = best.double()
            out[~torch.isfinite(top) & (best >= 0)] = math.nan
            return out.cpu().numpy()
        return self._by_chunks(X, labels).astype(np.int64)

    def _noise_log_joint(self) -> float:
        """``log pi_0 + log(1 / V)`` of the background head (preprocessed units)."""
        return math.log(self.noise_weight_) + self.noise_log_density_

    def fit_predict(self, X, y=None, sample_weight=None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def _heads64(self) -> torch.Tensor:
        return torch.as_tensor(self.cluster_centers_, dtype=torch.float64,
                               device=self._plan.device)

    def layer_output(self, X) -> np.ndarray:
        """Layer outputs ``T_mu(x) = sum_h a_h(x) mu_h`` of the preprocessed rows, shape
        (n_samples, n_features), in the dtype of ``X`` (what ``transform`` returned before
        0.3)."""
        return self._by_chunks(X, lambda Xp: self._outputs(Xp).cpu().numpy(), keep_dtype=True)

    def _outputs(self, Xp) -> torch.Tensor:
        """``T_mu(x)`` of the preprocessed rows ``Xp`` (float64, on the plan's device)."""
        return softmax_heads(self._logits(Xp)) @ self._heads64()

    def squared_errors(self, X) -> np.ndarray:
        """The layer's squared error ``||x - T_mu(x)||^2`` of each preprocessed row, shape
        (n_samples,), float64: the terms of the layer's empirical risk (shaped heads are
        fitted on their likelihood instead: their ``loss_curve_`` is ``-score``).

        Examples
        --------
        >>> import attnclust as ac
        >>> X = np.r_[np.zeros((5, 2)), np.full((5, 2), 10.0)]
        >>> est = ac.AttentionClustering(2, random_state=0).fit(X)
        >>> float(est.squared_errors(X).max()) < 1e-9     # each row is its head
        True
        """
        def errors(Xp):
            x = torch.as_tensor(np.ascontiguousarray(Xp, dtype=np.float64),
                                device=self._plan.device)
            return ((x - self._outputs(Xp)) ** 2).sum(1).cpu().numpy()
        return self._by_chunks(X, errors)

    def transform(self, X) -> np.ndarray:
        """Euclidean distances ``||x - mu_h||`` of the preprocessed rows to the cluster
        centres, shape (n_samples, n_clusters), in the dtype of ``X`` (``KMeans.transform``'s
        space; the layer's output is :meth:`layer_output`); a row refused only where a
        distance itself overflows float64 (or the float32 of ``X``), not its square."""
        def distances(Xp):
            X64 = torch.as_tensor(np.ascontiguousarray(Xp, dtype=np.float64),
                                  device=self._plan.device)
            heads = self._heads64()
            out = squared_distances(X64, heads).sqrt()
            far = ~torch.isfinite(out).all(1)    # a square overflows, the distance may not:
            if bool(far.any()):                  # the differences scaled to at most one first
                diff = X64[far, None] - heads
                scale = diff.abs().amax(-1).clamp_min(torch.finfo(torch.float64).tiny)
                out[far] = scale * (diff / scale[..., None]).square().sum(-1).sqrt()
            return out.cpu().numpy()
        return self._by_chunks(X, distances, keep_dtype=True)

    @property
    def _n_features_out(self) -> int:
        """``K`` columns of ``transform`` (``get_feature_names_out``)."""
        return len(self.cluster_centers_)
