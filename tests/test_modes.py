"""The modes of a Gaussian mixture (:mod:`attnclust.cluster.choice.modes`) against the
closed forms of two-component mixtures, and ``n_clusters="auto"`` counting them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

import attnclust as ac
from attnclust.cluster.choice.modes import mixture_modes


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("gap, modes", [(1.9, 1), (2.1, 2), (4.0, 2)])
def test_two_equal_gaussians_have_two_modes_beyond_two_spreads(d, gap, modes):
    # N(0, s^2 I) and N(gap s e_1, s^2 I), weights 1/2: bimodal iff gap > 2 (the density
    # along the line between the means is that of the one-dimensional mixture)
    s = 0.7
    means = np.zeros((2, d))
    means[1, 0] = gap * s
    found = mixture_modes(means, np.full(2, s * s), np.full(2, 0.5))
    assert found.max() + 1 == modes


@pytest.mark.parametrize("gap", [1.9, 2.1, 3.0])
def test_the_count_does_not_change_under_an_affine_map(gap):
    # an invertible map A of the space maps modes to modes: the full covariances A S A^T
    # of the two Gaussians above count as many as their spherical form
    rng = np.random.default_rng(int(10 * gap))
    A = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    means = np.array([[0.0, 0.0, 0.0], [gap, 0.0, 0.0]])
    spherical = mixture_modes(means, np.ones(2), np.full(2, 0.5))
    full = mixture_modes(means @ A.T + 5.0, np.stack([A @ A.T] * 2), np.full(2, 0.5))
    assert full.tolist() == spherical.tolist()


@pytest.mark.parametrize("share", [0.05, 0.5, 0.95])
def test_components_on_one_centre_have_one_mode(share):
    # narrow and wide Gaussians of one mean: the mixture decreases away from it
    found = mixture_modes(np.zeros((2, 2)), np.array([0.01, 4.0]), np.array([share, 1 - share]))
    assert found.tolist() == [0, 0]


def test_three_separated_groups_of_components():
    # each group: a narrow core and two wide components beside it, 20 spreads from the next
    rng = np.random.default_rng(0)
    centres = 20.0 * np.eye(3)[:, :2]
    means = np.concatenate([c + rng.normal(0, 0.3, (3, 2)) for c in centres])
    covs = np.tile([0.2, 3.0, 3.0], 3)
    found = mixture_modes(means, covs, np.full(9, 1 / 9))
    assert found.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def _peaked(d, n_each, spread, rng):
    """Two clusters whose rows lie at a Gaussian-distributed distance, in a uniform
    direction, from centres 100 sqrt(d) apart: a density peaked at each centre."""
    X = []
    for centre in (0.0, 100.0):
        u = rng.normal(size=(n_each, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        X.append(centre + u * rng.normal(size=(n_each, 1)) * spread)
    return np.concatenate(X), np.repeat([0, 1], n_each)


def test_auto_counts_two_peaked_clusters_that_take_many_components():
    X, y = _peaked(4, 500, 40.0, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ac.WeakChoiceWarning)
        est = ac.AttentionClustering("auto", max_clusters=10, random_state=0).fit(X)
    assert est.k_choice_.best > 2                  # the BIC's count of components
    assert est.k_choice_.n_clusters == est.n_clusters_ == 2
    assert "modes of their density" in est.n_clusters_reason_
    assert adjusted_rand_score(y, est.labels_) > 0.9


def test_auto_keeps_separated_gaussian_clusters():
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(c, 1.0, (150, 2)) for c in ((0, 0), (6, 0), (0, 6), (6, 6))])
    est = ac.AttentionClustering("auto", max_clusters=8, random_state=0).fit(X)
    assert est.n_clusters_ == est.k_choice_.best == 4
    assert "modes" not in est.n_clusters_reason_


def test_a_covariance_not_positive_definite_counts_no_modes(monkeypatch):
    # rounding can leave a full covariance singular: the components are then the count
    import attnclust.cluster.choice.k_choice as k_choice

    def singular(means, covariances, weights):
        np.linalg.cholesky(np.zeros((2, 2)))
    monkeypatch.setattr(k_choice, "mixture_modes", singular)
    X, _ = _peaked(4, 500, 40.0, np.random.default_rng(0))
    choice = k_choice.choose_n_clusters(X, 10, random_state=0)
    assert choice.n_clusters == choice.best > 2


def test_one_mode_is_said_and_doubted(monkeypatch):
    """Where the components climb to one mode, the reason gives that count (it gave the
    2 chosen) and the choice is weak."""
    import attnclust.cluster.choice.k_choice as k_choice

    monkeypatch.setattr(k_choice, "mixture_modes", lambda means, covs, w: np.zeros(len(means), int))
    X, _ = _peaked(4, 500, 40.0, np.random.default_rng(0))
    choice = k_choice.choose_n_clusters(X, 10, random_state=0)
    assert choice.n_clusters == 2 < choice.best and choice.weak
    assert "climb to 1 mode of" in choice.reason and "one mode: K = 2" in choice.reason
