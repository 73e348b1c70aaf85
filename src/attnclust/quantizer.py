"""STUB (contract for the implementer; replace this whole file)."""

__all__ = ["AttentionQuantizer"]


class AttentionQuantizer:  # noqa: D101
    pass
