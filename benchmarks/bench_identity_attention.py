"""Identity attention: throughput against this machine's own matmul rate, and memory.

One step of ``Q_lambda`` costs two ``L x L x d`` matrix products, ``4 L^2 d`` flops (the
``L^2`` exponentials come on top and are not counted). Each row reports

- ``fraction``: achieved flop rate over the rate of ``torch.mm`` on square matrices of
  the same dtype, measured in the same run (the best of the measurements before and
  after the attention runs, so the fraction is conservative). Target: >= 0.5 for the
  float32 fused and chunked paths at ``L = 50,000, d = 16``.
- ``peak_mb``: growth of the resident memory of a fresh subprocess that runs only that
  backend: the largest resident size sampled every millisecond from ``/proc/self/statm``
  during the calls (``ru_maxrss`` where ``/proc`` is missing), minus the resident size
  just before them (after importing torch, building the prompt and a small warm-up
  call). Target: < 1 GB, i.e. no ``L x L`` matrix (one would be 10 GB in float32 at
  ``L = 50,000``).
- ``max_L_24GiB``: the largest prompt that fits in 24 GiB, from the measured point and
  the memory law of the backend: ``peak = c L^2`` for ``dense`` (so
  ``L_max = L sqrt(24 GiB / peak)``) and ``peak <= b L`` for ``fused``/``chunked``
  (``b = peak / L`` bytes per token, an upper bound as it includes fixed-size blocks, so
  ``L_max = 24 GiB / b`` is a lower bound). ``hours_at_max`` extrapolates the measured
  time by ``(L_max / L)^2``: for the O(L d) paths time, not memory, is the limit.

Run by ``attnclust bench`` (``--quick`` for small sizes). Timings on a shared machine
are noisy; the fraction is measured against a baseline taken in the same run.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import threading
import time

D = 16
GIB24 = 24 * 2**30


def _best_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_rate(dtype_name: str, n: int, reps: int = 3) -> float:
    """Flop rate of ``torch.mm`` on ``n x n`` matrices (best of ``reps``), in GFLOP/s."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)  # warm-up
    return 2 * n**3 / _best_time(lambda: torch.mm(a, b), reps) / 1e9


class _PeakRSS:
    """Largest resident set size seen while the ``with`` block runs, in bytes."""

    def __enter__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:  # no /proc: fall back to the high-water mark
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _worker(backend: str, dtype_name: str, L: int, reps: int) -> dict:
    """Run one backend in this (fresh) process: best time and peak memory growth."""
    import torch

    import attnclust as ac
    from attnclust.study.in_context import identity_attention

    dtype = getattr(torch, dtype_name)
    sigma = 0.3
    lam = 1.0 / (1.0 + 2.0 * sigma**2)
    X = torch.as_tensor(ac.GaussianMixture.orthogonal(d=D, k=2, sigma=sigma).sample(L, rng=0),
                        dtype=dtype)
    identity_attention(X[:512], lam, backend=backend)  # warm-up: threads, kernels
    base = _rss()
    with _PeakRSS() as mem:
        seconds = _best_time(lambda: identity_attention(X, lam, backend=backend), reps)
    return {"seconds": seconds, "peak_bytes": max(mem.peak - base, 0),
            "threads": torch.get_num_threads()}


def _measure(backend: str, dtype_name: str, L: int, reps: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", backend, dtype_name, str(L), str(reps)],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    """Rows: backend x dtype at the target size, with the dense reference beside them."""
    long_L = 5_000 if quick else 50_000
    dense_L = 2_000 if quick else 10_000
    mm_n = 1024 if quick else 4096
    reps = 1 if quick else 2
    plan = [(backend, dtype, long_L) for dtype in ("float32", "float64")
            for backend in ("fused", "chunked")]
    plan += [("dense", dtype, dense_L) for dtype in ("float32", "float64")]

    mm = {dt: matmul_rate(dt, mm_n) for dt in ("float32", "float64")}
    results = [(backend, dtype, L, _measure(backend, dtype, L, reps))
               for backend, dtype, L in plan]
    mm = {dt: max(rate, matmul_rate(dt, mm_n)) for dt, rate in mm.items()}

    rows = []
    for backend, dtype, L, res in results:
        gflops = 4 * L**2 * D / res["seconds"] / 1e9
        peak = max(res["peak_bytes"], 1)
        if backend == "dense":
            max_L = int(L * math.sqrt(GIB24 / peak))
        else:
            max_L = int(GIB24 / (peak / L))
        rows.append({
            "backend": backend,
            "dtype": dtype,
            "L": L,
            "d": D,
            "seconds": res["seconds"],
            "gflops": gflops,
            "mm_gflops": mm[dtype],
            "fraction": gflops / mm[dtype],
            "peak_mb": res["peak_bytes"] / 2**20,
            "max_L_24GiB": max_L,
            "hours_at_max": res["seconds"] * (max_L / L) ** 2 / 3600,
            "threads": res["threads"],
            "target": ("fraction>=0.5, peak<1GB"
                       if dtype == "float32" and backend != "dense" and L == 50_000 else ""),
        })
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        print(json.dumps(_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                 int(sys.argv[5]))))
    else:
        from attnclust._bench import format_table

        print(format_table(run(quick="--quick" in sys.argv)))
