"""
The study's figures, in small
=============================

Every figure of the study is one command, ``attnclust reproduce figN``; the same runs
are a function call from Python. Here figures 1 and 3 with their small ``--quick``
configurations (a second or two each; the full configurations give the numbers quoted
in the user guide). Results are cached as ``.npz`` and ``.json`` next to the ``.png``,
so a second call re-plots without computing.
"""

import json
import tempfile

import matplotlib.pyplot as plt

from attnclust.study.experiments import FIGURES, reproduce

out = tempfile.mkdtemp()
paths = {name: reproduce(name, out=out, quick=True) for name in ("fig1", "fig3")}

# %%
# Each figure's JSON holds its settings, its summary numbers and every array it plots.
summaries = {name: json.loads(p.json.read_text())["summary"] for name, p in paths.items()}
for name in paths:
    print(name, "-", FIGURES[name].DESCRIPTION)
for key, value in summaries["fig1"].items():         # one entry per inverse temperature
    print(f"  fig1 {key}: median final distance {value['final_distance_median']:.4f}")
print("  fig3 within-cluster spread ratio:",
      round(summaries["fig3"]["within_cluster_spread_ratio"], 4))

# %%
# Figure 1 (distance to the centroids along PGD, one curve per inverse temperature)
# and figure 3 (inputs and outputs of the trained two-head layer), as written to disk.
fig, axes = plt.subplots(2, 1, figsize=(9, 7.5), constrained_layout=True,
                         height_ratios=[1, 1.1])
for ax, name in zip(axes, paths, strict=True):
    ax.imshow(plt.imread(paths[name].png))
    ax.set_axis_off()
    ax.set_title(f"{name} (quick)")
plt.show()
