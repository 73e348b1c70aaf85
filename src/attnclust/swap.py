"""The single swap of a streamed fit: now :mod:`attnclust.kmeans.swap`.

Kept so that the old import paths work.
"""

from .kmeans.swap import Swap, nearest_two, single_swap, swap_polish

__all__ = ["Swap", "nearest_two", "single_swap", "swap_polish"]
