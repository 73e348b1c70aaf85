"""Geometries and covariance types are values of their class alone (layer.geometry.Stateless)."""

from __future__ import annotations

import pytest

from attnclust.cluster.mixture.covariance import AUTO, Diag, Full, Spherical
from attnclust.layer.geometry import Euclidean, Sphere

KINDS = [Sphere, Euclidean, Spherical, Diag, Full]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_instances_of_one_class_are_one_value(kind):
    a, b = kind(), kind()
    assert a is not b and a == b and hash(a) == hash(b) and repr(a) == f"{kind.__name__}()"
    assert {a: 1}[b] == 1


def test_instances_of_different_classes_differ():
    values = [kind() for kind in KINDS]
    assert [[a == b for b in values] for a in values] == [
        [i == j for j in range(len(KINDS))] for i in range(len(KINDS))]
    assert len(set(values)) == len(KINDS)


def test_the_auto_marker_keeps_identity_equality():
    assert AUTO == AUTO and AUTO != Spherical() and repr(AUTO) == "ShapeChoiceMarker()"
