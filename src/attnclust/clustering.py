"""STUB (contract for the implementer; replace this whole file)."""

__all__ = ["AttentionClustering"]


class AttentionClustering:  # noqa: D101
    pass
