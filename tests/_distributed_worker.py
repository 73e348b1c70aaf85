"""A rank of the data-parallel tests, launched by tests/test_distributed.py.

Usage: python _distributed_worker.py MODE DATA.npy OUT_PREFIX [SPEC], with the torchrun
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set by the test.
MODE: "fit" (save this rank's centers), "crash" (rank 1 exits mid-fit), "hang" (rank 1
stops answering mid-fit), "pgd" (save this rank's full-batch and mini-batch PGD results),
"weighted" (a fit with sample weights, saving centers and labels).
"""

import os
import sys
import time

import numpy as np
import torch.distributed as dist

from attnclust.cluster import distributed as ddp

mode, data, out = sys.argv[1:4]
rank, world = ddp.init_from_env(backend="gloo", timeout=float(os.environ.get("PG_TIMEOUT", 5)))

if mode == "pgd":  # argv[4]: JSON {"heads0": [[...]], "full": {...}, "sgd": {...}}
    import json

    spec = json.loads(sys.argv[4])
    X = ddp.shard_rows(data, rank, world)
    full = ddp.pgd_distributed(X, spec["heads0"], **spec["full"])
    sgd = ddp.pgd_distributed(X, spec["heads0"], **spec["sgd"])
    np.savez(f"{out}.pgd{rank}.npz", full=full.heads.numpy(), full_risk=full.history.risk,
             sgd=sgd.heads.numpy(), sgd_risk=sgd.history.risk)
    # exiting with a live gloo group can abort in its threads' teardown
    dist.destroy_process_group()
    sys.exit(0)


def callback(info):
    if rank == 1 and info.iteration == 2:
        if mode == "crash":
            os._exit(3)
        if mode == "hang":
            time.sleep(120)


if mode == "weighted":  # argv[4]: the weights of all rows (.npy); argv[5]: init (.npy)
    X = ddp.shard_rows(data, rank, world)
    start, stop = ddp.shard_bounds(ddp.shard_rows(data, 0, 1).shape[0], rank, world)
    est = ddp.fit_distributed(X, 3, sample_weight=np.load(sys.argv[4])[start:stop],
                              init=np.load(sys.argv[5]), tol=1e-10, max_iter=500)
    np.save(f"{out}.rank{rank}.npy", est.cluster_centers_)
    np.save(f"{out}.labels{rank}.npy", est.labels_)
    dist.destroy_process_group()
    sys.exit(0)

X = ddp.shard_rows(data, rank, world)
est = ddp.fit_distributed(X, 4, geometry="sphere", init="sphere", normalize="center-scale",
                          penalty="balance",
                          rho=0.05, tol=1e-10, max_iter=200, random_state=7, callback=callback)
np.save(f"{out}.rank{rank}.npy", est.cluster_centers_)
np.save(f"{out}.labels{rank}.npy", est.labels_)
dist.destroy_process_group()
