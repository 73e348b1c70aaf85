"""Objects whose class is all their state: the geometries of the layer and the heads'
covariance types (:mod:`attnclust.cluster.mixture.covariance`) are such values."""

from __future__ import annotations

__all__ = ["Stateless"]


class Stateless:
    """A value with no state but its class: shown as ``Name()``, equal to (and hashed as)
    every instance of the same class, so that ``Sphere() == Sphere()`` and either may key a
    table.

    Examples
    --------
    >>> class Unit(Stateless):
    ...     pass
    >>> Unit(), Unit() == Unit(), len({Unit(), Unit()})
    (Unit(), True, 1)
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))
