"""The picture of the two geometries: cones from the origin against k-means cells.

Run from the repository root: ``python docs/geometry.py`` writes ``docs/geometry.png``
(shown by the README and the estimator's page). The picture is drawn by the gallery's
example ``examples/plot_geometry.py``: both panels fit ``AttentionClustering`` to the
same 2-D data, five blobs in the positive quadrant (one of them behind another, on the
same ray from the origin); the background is the cluster each point of the plane is
assigned to, the crosses are the heads.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import matplotlib

HERE = Path(__file__).resolve().parent
OUT = HERE / "geometry.png"
EXAMPLE = HERE.parent / "examples" / "plot_geometry.py"


def main(out: Path = OUT) -> None:
    matplotlib.use("Agg")               # plt.show() in the example draws nothing here
    import matplotlib.pyplot as plt

    runpy.run_path(str(EXAMPLE), run_name="__main__")
    plt.gcf().savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
