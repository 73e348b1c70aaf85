"""The picture of a fit: PCA against scikit-learn's, the sample, the boundary, the labels."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.contour import ContourSet
from sklearn.decomposition import PCA

import attnclust as ac
from _tolerance import eps, sum_tol
from attnclust.plotting.clusters import plot_clusters, principal_axes


def test_principal_axes_are_scikit_learns_pca():
    X = ac.GaussianMixture.random(d=6, k=4, sigma=0.2, rng=0).sample(5000, rng=0)
    mean, axes, share = principal_axes(X, block=777)         # blocks that do not divide n
    ref = PCA(2).fit(X)
    # blocks against one pass: sums of n rows of size |x| (the mean), of |x|^2 (the
    # covariance C); an eigenvector moves by the covariance's error over the gap to the
    # next eigenvalue (Davis-Kahan), so |cos| by its square; shares by C's error over trace
    n, d = X.shape
    big = float(np.abs(X).max())
    c_err = 2 * sum_tol(n + d) * d * big**2
    var = ref.explained_variance_
    gap = min(var[0] - var[1], var[1] - PCA(3).fit(X).explained_variance_[2])
    np.testing.assert_allclose(mean, ref.mean_, rtol=0, atol=sum_tol(n) * big)
    np.testing.assert_allclose(np.abs(np.sum(axes * ref.components_, axis=1)), 1.0, rtol=0,
                               atol=(c_err / gap) ** 2 + (d + 2) * eps())
    total = float(np.var(X, axis=0).sum())
    np.testing.assert_allclose(share, ref.explained_variance_ratio_, rtol=0,
                               atol=2 * c_err / total)


def _scatter_sizes(ax) -> list[int]:
    return [len(c.get_offsets()) for c in ax.collections if not isinstance(c, ContourSet)]


def test_many_rows_are_sampled_and_the_title_says_so():
    X = ac.GaussianMixture.random(d=5, k=3, sigma=0.1, rng=0).sample(25_000, rng=0)
    est = ac.AttentionClustering(3, random_state=0).fit(X)
    ax = plot_clusters(est, X, labels=est.labels_, max_points=1000).axes[0]
    assert max(_scatter_sizes(ax)) == 1000                    # the rows drawn
    assert "random sample of 1,000 of 25,000 rows (seed 0)" in ax.get_title()
    assert ax.get_xlabel().startswith("PC1 (") and ax.get_ylabel().startswith("PC2 (")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    sizes = np.bincount(est.labels_, minlength=3)
    assert legend == [f"cluster {k}: {sizes[k]:,} rows" for k in range(3)] + ["heads"]
    # the heads are drawn at their PCA coordinates
    mean, axes, _ = principal_axes(X)
    heads = [c for c in ax.collections if len(c.get_offsets()) == 3][0]
    # (c - m) @ axes^T, maybe in another order: d + 1 roundings of terms |c| + |m|
    size = np.abs(est.cluster_centers_).max() + np.abs(mean).max()
    np.testing.assert_allclose(heads.get_offsets(), (est.cluster_centers_ - mean) @ axes.T,
                               rtol=0, atol=(X.shape[1] + 1) * eps() * size)
    few = plot_clusters(est, X[:500]).axes[0]
    assert max(_scatter_sizes(few)) == 500 and "sample" not in few.get_title()


def test_two_dimensional_boundary_is_the_bisector_of_the_heads():
    """Two Euclidean heads: argmax_h softmax(-lambda ||x - mu_h||^2 / 2) changes on the
    bisector of the heads; every vertex of the drawn boundary lies within a grid cell."""
    X = ac.GaussianMixture.random(d=2, k=2, sigma=0.2, rng=1).sample(600, rng=0)
    est = ac.AttentionClustering(2, random_state=0).fit(X)
    ax = plot_clusters(est, X).axes[0]
    lines = [c for c in ax.collections if isinstance(c, ContourSet) and not c.filled]
    vertices = np.vstack([p.vertices for c in lines for p in c.get_paths()])
    a, b = est.cluster_centers_
    normal = (b - a) / np.linalg.norm(b - a)
    distance = np.abs((vertices - (a + b) / 2) @ normal)
    span = np.ptp(np.vstack([X, est.cluster_centers_]), axis=0).max() * 1.1
    assert len(vertices) > 20 and distance.max() < span / 160 * 1.5
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x1", "x2")


def test_sphere_rows_are_drawn_on_the_circle():
    X = ac.GaussianMixture.random(d=2, k=3, sigma=0.1, rng=0).sample(300, rng=0) * 7.0
    est = ac.AttentionClustering(3, geometry="sphere", random_state=0).fit(X)
    ax = plot_clusters(est, X).axes[0]
    rows = [c.get_offsets() for c in ax.collections
            if not isinstance(c, ContourSet) and len(c.get_offsets()) == 300][0]
    # normalized rows (d = 2): a norm and a quotient, then this norm
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=0, atol=(2 + 2) * 2 * eps())


def test_one_column_is_refused():
    est = ac.AttentionClustering(2, random_state=0).fit(np.arange(20.0).reshape(10, 2))
    with pytest.raises(ValueError, match="at least 2 columns"):
        plot_clusters(est, np.zeros((10, 1)))


def test_rows_as_a_list_and_bad_companions():
    """A list of rows (array-like, as documented) was an AttributeError; a 1-D array, too
    few labels and max_points=0 were errors from inside NumPy and scikit-learn."""
    X = np.arange(40.0).reshape(20, 2)
    est = ac.AttentionClustering(2, random_state=0).fit(X)
    assert len(plot_clusters(est, X.tolist()).axes) >= 1
    for kwargs, match in ((dict(X=X[:, 0]), r"at least 2 columns, got shape \(20,\)"),
                          (dict(X=X, labels=np.zeros(3, int)), "labels has 3 entries, X 20"),
                          (dict(X=X, max_points=0), "max_points must be at least 1")):
        with pytest.raises(ValueError, match=match):
            plot_clusters(est, **kwargs)


def test_legend_counts_all_rows_only_when_it_knows_them():
    X = ac.GaussianMixture.random(d=3, k=2, sigma=0.1, rng=0).sample(3000, rng=0)
    est = ac.AttentionClustering(2, random_state=0).fit(X)

    def legend(**kw):
        ax = plot_clusters(est, X, max_points=500, **kw).axes[0]
        return [t.get_text() for t in ax.get_legend().get_texts()][:2]
    drawn = legend()
    assert all(t.endswith(" drawn") for t in drawn)
    assert sum(int(t.split(": ")[1].split()[0].replace(",", "")) for t in drawn) == 500
    sizes = np.bincount(est.labels_, minlength=2)
    assert legend(sizes=sizes) == [f"cluster {k}: {sizes[k]:,} rows" for k in range(2)]


def test_one_cluster_is_drawn_without_a_boundary():
    """K = 1 (as n_clusters='auto' may choose): one cell, attention 1 everywhere, so no
    shades and no boundary; the rows and the head are still drawn."""
    X = ac.GaussianMixture.random(d=2, k=1, sigma=0.3, rng=0).sample(300, rng=0)
    est = ac.AttentionClustering(1, random_state=0).fit(X)
    ax = plot_clusters(est, X, labels=est.labels_).axes[0]
    assert not [c for c in ax.collections if isinstance(c, ContourSet)]
    assert sorted(s for s in _scatter_sizes(ax) if s) == [1, 300]


def test_noise_rows_are_grey_and_counted_apart():
    """A fit with a noise head: the rows it labels -1 are drawn grey and the legend counts
    them beside the clusters (the sizes of all rows add up)."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.5, (100, 2)) for c in ((0, 0), (4, 0), (0, 4))]
                       + [rng.uniform(-6, 10, (60, 2))])
    est = ac.AttentionClustering(3, noise_head=True, random_state=0).fit(X)
    est.set_params(noise_head=False)       # changes the next fit, not this one's picture
    fig = plot_clusters(est, X)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    noise = int((est.labels_ == -1).sum())
    assert noise > 0 and f"noise (-1): {noise:,} drawn" in texts
    counts = [int(t.split(": ")[1].split()[0].replace(",", "")) for t in texts
              if t.startswith("cluster")]
    assert sum(counts) + noise == len(X)
    rows = next(c for c in fig.axes[0].collections if len(c.get_offsets()) == len(X))
    grey = np.all(rows.get_facecolors()[:, :3] == 0.6, axis=1)
    np.testing.assert_array_equal(grey, est.labels_ == -1)


def test_principal_axes_of_wide_rows_are_scikit_learns_pca():
    """Beyond 256 columns the axes come from Lanczos iterations on the rows (no d x d
    matrix); at most 5,000 rows are read, so 400 rows give PCA's axes and shares, to the
    iterations' convergence on eigenvalues 9 and 4 over noise of variance 0.01."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 600)) * np.r_[3.0, 2.0, np.full(598, 0.1)]
    mean, axes, share = principal_axes(X)
    ref = PCA(2).fit(X)
    np.testing.assert_allclose(mean, ref.mean_, atol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(axes * ref.components_, axis=1)), 1.0,
                               atol=1e-9)
    np.testing.assert_allclose(share, ref.explained_variance_ratio_, rtol=1e-9)


def test_a_two_column_picture_names_its_axes_by_the_columns():
    X = ac.GaussianMixture.orthogonal(d=2, k=2, sigma=0.1).sample(200, rng=0)
    est = ac.AttentionClustering(2, random_state=0).fit(X)
    fig = plot_clusters(est, X, feature_names=["height", "weight"])
    assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == ("height", "weight")
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=["a", "b"])
    fig = plot_clusters(ac.AttentionClustering(2, random_state=0).fit(frame), X)
    assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == ("a", "b")
