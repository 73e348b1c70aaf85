import os

import pytest
import torch

from attnclust import _atomic

# The worker script is run by torchrun in a subprocess, not imported by pytest.
collect_ignore = ["_distributed_worker.py"]


@pytest.fixture
def third_rename_fails(monkeypatch):
    """Make the third ``os.replace`` of :mod:`attnclust._atomic` fail (disk full); yields the
    destinations of every attempted rename."""
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(_atomic.os, "replace", replace)
    return calls


@pytest.fixture
def refuse_rename(monkeypatch):
    """Install, by calling it, an ``os.replace`` of :mod:`attnclust._atomic` that refuses
    (``PermissionError`` with ``reason``) the renames ``refused(src, dst)`` names, given
    the two paths' base names (a file the user may not move or replace)."""
    real = os.replace

    def install(refused, reason="Operation not permitted"):
        def replace(src, dst):
            if refused(os.path.basename(src), os.path.basename(dst)):
                raise PermissionError(1, reason)
            return real(src, dst)
        monkeypatch.setattr(_atomic.os, "replace", replace)
    return install


@pytest.fixture
def no_hard_links(monkeypatch):
    """A file system that refuses hard links: :mod:`attnclust._atomic`'s ``os.link`` fails."""
    def link(src, dst):
        raise OSError(1, "Operation not permitted")
    monkeypatch.setattr(_atomic.os, "link", link)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip, saying why, where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
