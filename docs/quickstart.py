"""The README's picture: k-means against the default fit and the noise head.

Run from the repository root: ``python docs/quickstart.py`` writes ``docs/quickstart.png``
(shown by the README and the front page). The picture is drawn by the gallery's first
example, ``examples/plot_quickstart.py``: four clusters, two of them long and tilted, over
uniform noise rows, fitted by ``KMeans(4, n_init=10)``, ``AttentionClustering(4)`` and
``AttentionClustering(4, noise_head=True)`` (grey: rows labelled -1).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import matplotlib

HERE = Path(__file__).resolve().parent
OUT = HERE / "quickstart.png"
EXAMPLE = HERE.parent / "examples" / "plot_quickstart.py"


def main(out: Path = OUT) -> None:
    matplotlib.use("Agg")               # plt.show() in the example draws nothing here
    import matplotlib.pyplot as plt

    runpy.run_path(str(EXAMPLE), run_name="__main__")
    plt.gcf().savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
