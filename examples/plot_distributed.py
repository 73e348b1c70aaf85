"""
Distributed fitting
===================

``AttentionClustering`` fits in data parallel: each process (rank) holds a shard of the
rows, and the fixed-point solver needs the data only through sums over rows, so each
pass all-reduces a few numbers per head and every rank ends with the same centres as one
process on all the rows. The seam is public: ``fit(X, comm=...)`` with an
``ac.Communicator(reduce, broadcast, offset, n_total)``.

Real runs use ``torchrun ... -m attnclust fit data.npy -k 8 --distributed`` or
:func:`attnclust.cluster.distributed.fit_distributed` in a ``torch.distributed`` group. Here,
to stay in one process, the same code runs twice: in a gloo group of one rank that
meets through a file in a temporary folder, and with two simulated ranks (threads)
whose ``reduce`` sums their tensors.
"""

import tempfile
import threading

import matplotlib.pyplot as plt
import numpy as np
import torch.distributed as dist

import attnclust as ac
from attnclust.cluster import distributed as ddp

mix = ac.GaussianMixture.random(d=2, k=4, sigma=0.15, rng=1)
X = mix.sample(2000, rng=0)
one = ac.AttentionClustering(4, random_state=0).fit(X)

# %%
# A gloo group of one rank: the code each rank runs under ``torchrun``.
tmp = tempfile.TemporaryDirectory()
np.save(f"{tmp.name}/data.npy", X)
dist.init_process_group("gloo", init_method=f"file://{tmp.name}/store", rank=0,
                        world_size=1)
rank, world = dist.get_rank(), dist.get_world_size()
shard = ddp.shard_rows(f"{tmp.name}/data.npy", rank, world)   # this rank's rows (memmap)
est = ddp.fit_distributed(shard, 4, random_state=0)
labels = ddp.gather_rows(est.labels_)                         # every rank's labels
dist.destroy_process_group()
tmp.cleanup()
print("gloo, 1 rank: max |centres - one process| =",
      np.abs(est.cluster_centers_ - one.cluster_centers_).max())

# %%
# Two simulated ranks: threads that meet at a barrier and sum their tensors in rank
# order, as an all-reduce does. Each thread fits on its own half of the rows.
world = 2
slots, barrier = [None] * world, threading.Barrier(world)


def exchange(rank, t, combine):
    slots[rank] = t.clone()
    barrier.wait()
    out = combine(list(slots))
    barrier.wait()
    return out


def fit_rank(rank, results):
    lo, hi = ddp.shard_bounds(len(X), rank, world)
    comm = ac.Communicator(
        reduce=lambda t: exchange(rank, t, lambda s: sum(s[1:], s[0])),
        broadcast=lambda t: exchange(rank, t, lambda s: s[0].clone()),
        offset=lo, n_total=len(X))
    results[rank] = ac.AttentionClustering(4, random_state=0).fit(X[lo:hi], comm=comm)


results = [None] * world
threads = [threading.Thread(target=fit_rank, args=(r, results)) for r in range(world)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for r, fitted in enumerate(results):
    print(f"thread rank {r}: max |centres - one process| =",
          np.abs(fitted.cluster_centers_ - one.cluster_centers_).max())
print("bytes all-reduced per pass for K = 4, d = 2:", ddp.pass_bytes(4, 2))

# %%
# Each rank's rows (two shades) with the centres of the two-rank fit and of one process.
fig, ax = plt.subplots(figsize=(5.5, 4.5), constrained_layout=True)
half = len(X) // 2
ax.scatter(*X[:half].T, s=3, color="C0", alpha=0.4, label="rank 0's rows")
ax.scatter(*X[half:].T, s=3, color="C1", alpha=0.4, label="rank 1's rows")
ax.scatter(*one.cluster_centers_.T, marker="o", s=120, facecolors="none",
           edgecolors="k", label="one process")
ax.scatter(*results[0].cluster_centers_.T, marker="x", s=60, c="k", label="two ranks")
ax.set(aspect="equal", title="data-parallel fit = one-process fit")
ax.legend(fontsize=8, loc="best")
plt.show()
