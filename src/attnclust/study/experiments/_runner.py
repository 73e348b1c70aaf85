"""Run a figure, cache its result as ``.npz`` + ``.json``, and plot it.

A figure module defines ``NAME``, ``DESCRIPTION``, ``CONFIG``, ``QUICK``,
``run(config, rng) -> FigureResult`` and ``plot(result, out)``, which writes
``out.png`` and ``out.pdf`` through :func:`attnclust.study.experiments._style.save`.
Computing and plotting are separate: a cached result whose config and seed match is
re-plotted, not recomputed. Every file is written to a temporary name and renamed, so an interrupted
run never leaves a corrupt cache; a cache damaged anyway (a truncated ``.npz``, a missing
array, unreadable JSON, arrays the plot cannot use) is recomputed, not trusted. The
output folder is checked for writing before anything is computed.
"""

from __future__ import annotations

import contextvars
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
from tqdm.auto import tqdm

from ..._atomic import atomic_path, writable_folder
from ..._threads import torch_threads

__all__ = ["FigureResult", "FigurePaths", "reproduce", "track", "load_result"]

_SHOW_PROGRESS = contextvars.ContextVar("show_progress", default=False)


@dataclass
class FigureResult:
    """What a figure computed: its config, the arrays it plots and its summary numbers."""

    config: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FigurePaths:
    """The files of one reproduced figure."""

    png: Path
    pdf: Path
    json: Path
    npz: Path


def track(iterable, *, desc: str, total: int | None = None):
    """Wrap ``iterable`` in a progress bar when the runner asks for one."""
    return tqdm(iterable, desc=desc, total=total, leave=False, disable=not _SHOW_PROGRESS.get())


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if np.isfinite(value) else None  # JSON has no NaN
    if isinstance(value, np.integer):
        return int(value)
    return value


def _stem(out: Path, name: str, quick: bool) -> Path:
    return out / (f"{name}-quick" if quick else name)


def load_result(path: str | Path) -> tuple[FigureResult, dict]:
    """Read a cached result from its ``.json`` (metadata) and ``.npz`` (arrays)."""
    path = Path(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    # our own handle: numpy leaks the one it opens when the archive turns out damaged
    with open(path.with_suffix(".npz"), "rb") as f, np.load(f, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return FigureResult(meta["config"], arrays, meta["summary"]), meta


def _load_cached(stem: Path, config: dict, seed: int) -> FigureResult | None:
    """The cached result of ``stem`` if it is complete and matches ``config`` and ``seed``."""
    if not (stem.with_suffix(".json").exists() and stem.with_suffix(".npz").exists()):
        return None
    try:
        cached, meta = load_result(stem)
    except Exception:   # any damage (zip, zlib, JSON, OS errors) means: recompute
        return None
    if meta.get("seed") != seed or meta.get("config") != _jsonable(config):
        return None
    plotted = meta.get("plotted")
    # the JSON, written last, holds every array: a .npz that lost one is incomplete, and
    # one that differs is another run's (two runs into one folder, a file copied in)
    if not isinstance(plotted, dict) or set(plotted) != set(cached.arrays):
        return None
    if not all(_same_array(plotted[k], a) for k, a in cached.arrays.items()):
        return None
    return cached


def _same_array(listed, array: np.ndarray) -> bool:
    """Whether the JSON's ``listed`` values are ``array``'s (:func:`_jsonable` wrote its
    non-finite numbers as ``null``)."""
    floats = array.dtype.kind == "f"
    try:
        values = np.asarray(listed, dtype=np.float64 if floats else array.dtype)
    except (TypeError, ValueError):
        return False
    if values.shape != array.shape:
        return False
    if not floats:
        return bool(np.array_equal(values, array))
    finite = np.isfinite(array)
    return bool(np.array_equal(np.isfinite(values), finite)
                and np.array_equal(values[finite], array[finite].astype(np.float64)))


def _save(result: FigureResult, stem: Path, meta: dict) -> None:
    # the old JSON goes first: a run stopped between the arrays and their JSON must not
    # leave another run's JSON beside them (it would vouch for them)
    stem.with_suffix(".json").unlink(missing_ok=True)
    with atomic_path(stem.with_suffix(".npz")) as tmp:
        np.savez_compressed(tmp, **result.arrays)
    document = {**meta, "config": _jsonable(result.config), "summary": _jsonable(result.summary),
                "plotted": _jsonable(result.arrays)}
    # the JSON is written last: its presence marks a complete cache entry
    with atomic_path(stem.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(document, indent=1))


def reproduce(module: ModuleType, *, out: str | Path = "results", quick: bool = False,
              seed: int = 0, recompute: bool = False, progress: bool = False) -> FigurePaths:
    """Compute (or load from cache) and plot one figure; return its file paths."""
    out = Path(out)
    stem = _stem(out, module.NAME, quick)
    config = module.QUICK if quick else module.CONFIG
    cached = None if recompute else _load_cached(stem, config, seed)
    if cached is not None:
        try:
            module.plot(cached, stem)
            return _paths(stem)
        except Exception:   # arrays the plot cannot use: a damaged cache, recompute it
            pass
    with writable_folder(out):      # an unwritable folder fails before the computation
        result, meta = _compute(module, config, seed, quick, progress)
        _save(result, stem, meta)
        module.plot(result, stem)
    return _paths(stem)


def _paths(stem: Path) -> FigurePaths:
    return FigurePaths(*(stem.with_suffix(s) for s in (".png", ".pdf", ".json", ".npz")))


def _compute(module: ModuleType, config: dict, seed: int, quick: bool,
             progress: bool) -> tuple[FigureResult, dict]:
    """Run the figure; return its result and the metadata its cache entry records."""
    token = _SHOW_PROGRESS.set(progress)
    # Figures are many small problems: one thread avoids the heavy synchronization
    # cost of tiny multi-threaded kernels (tens of times slower on a busy machine).
    try:
        with torch_threads(1):
            start = time.perf_counter()
            result = module.run(config, np.random.default_rng(seed))
            wall = time.perf_counter() - start
    finally:
        _SHOW_PROGRESS.reset(token)
    meta = {"figure": module.NAME, "description": module.DESCRIPTION, "seed": seed,
            "quick": quick, "wall_time_s": round(wall, 2)}
    return result, meta
