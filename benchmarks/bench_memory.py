"""Peak memory of ``attnclust fit`` on a memory-mapped float32 ``.npy``, against the data's size.

Each row runs ``attnclust fit DATA -k 8`` in a fresh process (so that the peak resident
set size, read from ``getrusage`` of that process, is its own) on ``K = 8`` Gaussian
clusters saved as float32, and subtracts the peak of the same command on 1,000 rows of
the same width (the interpreter, torch and scikit-learn). Target: the growth stays
within the data's own size plus O(chunk x d): the rows are memory-mapped, one working
copy is made in the data's dtype, and every pass reads them in chunks of 65,536 rows.
The streamed fit, ``attnclust fit --batch-rows N`` (``partial_fit`` over chunks of ``N``
rows, then the labels written chunk by chunk), makes no working copy: its growth should
be bounded by the chunk, not the file. Full: 5,000,000 x 8 (also streamed in chunks of
100,000 and 20,000 rows) and 1,000,000 x 128; quick: a tenth of the rows.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import attnclust as ac

_PEAK = ("import resource, subprocess, sys; "
         "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _peak_mib(path: Path, out: Path, *options: str) -> float:
    """Peak RSS (MiB) of ``attnclust fit`` on ``path`` (``ru_maxrss`` is in KiB on Linux)."""
    cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "attnclust", "fit", str(path),
           "-k", "8", "--quiet", "--out", str(out), *options]
    return int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout) / 1024


def _save(path: Path, n: int, d: int) -> None:
    """``n`` rows of 8 clusters in ``d`` dimensions, written in blocks (never all in memory)."""
    mix = ac.GaussianMixture.random(d=d, k=8, sigma=0.15, min_angle=np.pi / 3, rng=0)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for i, start in enumerate(range(0, n, 500_000)):
        stop = min(n, start + 500_000)
        X[start:stop] = mix.sample(stop - start, rng=i) + 2.0
    X.flush()
    del X


def run(quick: bool) -> list[dict]:
    rows = []
    for n, d, streams in ((5_000_000, 8, (100_000, 20_000)), (1_000_000, 128, ())):
        n //= 10 if quick else 1
        data = n * d * 4 / 2**20
        with tempfile.TemporaryDirectory() as tmp:
            big, small = Path(tmp) / "big.npy", Path(tmp) / "small.npy"
            _save(big, n, d)
            _save(small, 1_000, d)
            base = _peak_mib(small, Path(tmp) / "s")
            for chunk in (None, *streams):
                options = () if chunk is None else ("--batch-rows", str(chunk))
                peak = _peak_mib(big, Path(tmp) / "b", *options)
                rows.append({"data": f"{n} x {d} float32", "fit": " ".join(options) or "fit",
                             "data_MiB": data, "baseline_MiB": base, "peak_MiB": peak,
                             "growth_MiB": peak - base, "growth / data": (peak - base) / data})
    return rows
