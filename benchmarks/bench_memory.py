"""Peak memory of ``attnclust fit`` on a memory-mapped float32 ``.npy``, against the data's size.

Each row runs ``attnclust fit DATA -k 8`` in a fresh process (so that the peak resident
set size, read from ``getrusage`` of that process, is its own) on ``K = 8`` Gaussian
clusters saved as float32, and subtracts the peak of the same command on 1,000 rows of
the same width (the interpreter, torch and scikit-learn). Target (issue 18): the growth
stays within 1.5x the file: the rows stay memory-mapped (no copy, in C or Fortran order),
every pass reads them in chunks of about 2 MB, and the warm-start sample is kept in the
data's dtype. The streamed fit, ``attnclust fit --batch-rows N`` (``partial_fit`` over
chunks of ``N`` rows, then the labels written chunk by chunk), makes no working copy: its
growth should be bounded by the chunk, not the file. Full: 70,000 x 784 (the shape of
MNIST-like images), 5,000,000 x 8 (also streamed in chunks of 100,000 and 20,000 rows),
and the same 5,000,000 x 8 file in Fortran order; quick: a tenth of the rows.
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


def _save(path: Path, n: int, d: int, fortran: bool = False) -> None:
    """``n`` rows of 8 clusters in ``d`` dimensions, written in blocks (never all in memory)."""
    mix = ac.GaussianMixture.random(d=d, k=8, sigma=0.15, min_angle=np.pi / 3, rng=0)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d),
                                  fortran_order=fortran)
    for i, start in enumerate(range(0, n, 500_000)):
        stop = min(n, start + 500_000)
        X[start:stop] = mix.sample(stop - start, rng=i) + 2.0
    X.flush()
    del X


def run(quick: bool) -> list[dict]:
    rows = []
    for n, d, fortran, streams in ((70_000, 784, False, ()),
                                   (5_000_000, 8, False, (100_000, 20_000)),
                                   (5_000_000, 8, True, ())):
        n //= 10 if quick else 1
        data = n * d * 4 / 2**20
        with tempfile.TemporaryDirectory() as tmp:
            big, small = Path(tmp) / "big.npy", Path(tmp) / "small.npy"
            _save(big, n, d, fortran)
            _save(small, 1_000, d, fortran)
            base = _peak_mib(small, Path(tmp) / "s")
            order = "Fortran" if fortran else "C"
            for chunk in (None, *streams):
                options = () if chunk is None else ("--batch-rows", str(chunk))
                peak = _peak_mib(big, Path(tmp) / "b", *options)
                rows.append({"data": f"{n} x {d} float32, {order} order",
                             "fit": " ".join(options) or "fit", "data_MiB": data,
                             "baseline_MiB": base, "peak_MiB": peak,
                             "growth_MiB": peak - base, "growth / data": (peak - base) / data})
    return rows
