"""Data-parallel AttentionClustering: wall time with 1 and 2 processes, bytes per step.

Each configuration runs ``torchrun --nproc_per_node P -m attnclust fit DATA -k 8
--distributed`` (gloo, loopback) on ``n`` tokens of K = 8 well-separated unit centroids
in d = 32 (sigma = 0.15, fed as they are: ``--normalize none``), saved once as a .npy
that every rank memory-maps. Rows: processes x threads per process; the fit time printed
by rank 0 (from the process group's start of the fit to its end, excluding interpreter
start-up), the launch's total wall time, the steps, the all-reduce payload of one pass
(from the tensor sizes, :func:`attnclust.cluster.distributed.pass_bytes`) next to the one counted
by wrapping the reduction, and the speedup of the fit time over one process with one
thread. Full: n = 1,000,000; quick: n = 100,000.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import attnclust as ac
from attnclust.cluster.distributed import pass_bytes

CONFIGS = ((1, 1), (1, 2), (2, 1))     # (processes, threads per process)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(path: Path, procs: int, threads: int, out: Path) -> tuple[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "attnclust",
           "fit", str(path), "-k", "8", "--normalize", "none", "--distributed", "--quiet",
           "--seed", "0", "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"distributed fit failed: {proc.stderr[-1000:]}")
    return proc.stdout, wall


def run(quick: bool) -> list[dict]:
    n, d, K = (100_000 if quick else 1_000_000), 32, 8
    mix = ac.GaussianMixture.random(d=d, k=K, sigma=0.15, min_angle=np.pi / 3, rng=0)
    rows, base = [], None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, mix.sample(n, rng=1))
        per_pass = pass_bytes(K, d)
        centers = []
        for procs, threads in CONFIGS:
            out, wall = _launch(path, procs, threads, Path(tmp) / f"p{procs}t{threads}")
            fit = float(re.search(r"time=([\d.]+)s", out).group(1))
            steps = int(re.search(r"steps=(\d+)", out).group(1))
            m = re.search(r"(\d+) passes of (\d+) bytes", out)
            centers.append(np.load(Path(tmp) / f"p{procs}t{threads}.centers.npy"))
            base = fit if base is None else base
            rows.append({"n": n, "d": d, "K": K, "processes": procs, "threads/proc": threads,
                         "fit s": round(fit, 2), "launch s": round(wall, 2), "steps": steps,
                         "passes": int(m.group(1)), "bytes/pass (sizes)": per_pass,
                         "bytes/pass (counted)": int(m.group(2)),
                         "speedup vs 1x1": round(base / fit, 2),
                         "max |centers - 1x1|": float(np.abs(centers[-1] - centers[0]).max())})
    return rows


if __name__ == "__main__":
    from attnclust._bench import format_table

    print(format_table(run(quick="--quick" in sys.argv)))
