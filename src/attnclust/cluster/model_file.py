"""A fitted :class:`~attnclust.AttentionClustering` saved to a file and loaded back, without
pickle: :func:`save_model` and :func:`load_model`.

The file is a NumPy ``.npz`` archive (read with ``allow_pickle=False``, so loading it
runs no code from the file). It holds

==================  ===================================================================
entry               content
==================  ===================================================================
``meta.json``       a JSON text: the format and its version, the attnclust version that
                    wrote it, the parameters (``get_params()``; a ``settings``
                    :class:`~attnclust.cluster.settings.FitSettings` and a
                    ``merge_heads`` ``MergeSettings`` as the record of their fields,
                    rebuilt on loading), the fitted attributes that are numbers,
                    strings or JSON records, the names of the others and a SHA-256
                    digest of every entry
``attr.NAME``       each fitted attribute that is an array (``cluster_centers_``,
                    ``labels_``, ``covariances_``, ``weights_``, ...), in its own dtype
``param.NAME``      a parameter that is an array (given initial heads, ``init``)
==================  ===================================================================

The private plan of the predictions (:class:`~attnclust.cluster.plan.FitPlan`) is not
stored: it is resolved again from the parameters, as ``fit`` resolves it, for the
number of clusters and the heads' shape the fit chose
(:meth:`~attnclust.cluster.plan.FitPlan.with_clusters`,
:meth:`~attnclust.cluster.plan.FitPlan.with_covariance`). A loaded estimator therefore
predicts, gives attention weights and scores exactly as the one saved.

What is not kept: a ``callback`` and a ``random_state`` that is a generator (saved as
``None``; they act only in ``fit``), a torch ``dtype`` (saved by its name), and fitted
attributes that are neither arrays nor JSON values (the record of ``n_clusters="auto"``,
``k_choice_``, and a stream's running sums, ``stream_state_``); their names are in the
file's ``meta.json``. ``partial_fit`` on a loaded model goes on from its heads as after
``fit``, each head weighing the rows of its cluster in ``labels_``: the same as the
estimator saved after ``fit``; after a stream, whose ``labels_`` are its last batch's,
the heads weigh that batch's rows rather than the whole stream's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .degenerate import user_stacklevel
from .settings import FitSettings, MergeSettings

__all__ = ["FORMAT", "FORMAT_VERSION", "load_model", "model_info", "save_model", "write_model"]

FORMAT = "attnclust-model"
FORMAT_VERSION = 1
_META = "meta.json"


def _json_value(value, name: str = "info"):
    """``value`` as JSON (numbers, strings, booleans, None, lists and string-keyed dicts
    of them; NumPy scalars and arrays as Python's), or a ``ValueError`` naming the entry
    that is none of them.

    Examples
    --------
    >>> _json_value({"columns": np.array([1, 2]), "n": np.int64(3)})
    {'columns': [1, 2], 'n': 3}
    >>> _json_value({"when": {"day": object()}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: info['when']['day'] is a object: info holds JSON values only (...)
    """
    if isinstance(value, np.generic | np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"{name} has the key {key!r}: info's keys are strings")
        return {key: _json_value(v, f"{name}[{key!r}]") for key, v in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):  # no NamedTuple:
        return [_json_value(v, f"{name}[{i}]") for i, v in enumerate(value)]  # read as a list
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"{name} is a {type(value).__name__}: info holds JSON values only "
                     "(numbers, strings, booleans, None, and lists and string-keyed dicts "
                     "of them)")


def _digest(meta: dict, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the metadata (without its digest) and of every array's dtype, shape and
    bytes, in the order of their names."""
    h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "sha256"},
                                  sort_keys=True).encode())
    for name in sorted(arrays):
        a = arrays[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _split(values: dict, prefix: str, meta_key: str, meta: dict, arrays: dict) -> None:
    """Put each of ``values`` in ``arrays`` (``prefix.NAME``) or in ``meta[meta_key]``;
    names of values that fit neither go to ``meta["not_saved"]``."""
    meta[meta_key] = {}
    for name, value in values.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "biufcUSM?":
            arrays[f"{prefix}.{name}"] = value
        elif isinstance(value, np.ndarray) and value.dtype == object and all(
                isinstance(v, str) for v in value.ravel()):
            arrays[f"{prefix}.{name}"] = value.astype(str)     # feature names: str, not object
            meta.setdefault("object_arrays", []).append(f"{prefix}.{name}")
        elif isinstance(value, np.generic):          # a NumPy scalar keeps its dtype
            arrays[f"{prefix}.{name}"] = np.asarray(value)
            meta.setdefault("scalars", []).append(f"{prefix}.{name}")
        else:
            try:
                meta[meta_key][name] = _json_value(value)
            except (TypeError, ValueError):
                meta["not_saved"].append(name)


def _settings_params() -> dict:
    """The parameters that may hold a frozen dataclass of settings, and its class."""
    return {"settings": FitSettings, "merge_heads": MergeSettings}


def _saved_params(est) -> dict:
    """The parameters as saved: a callback and a generator seed as ``None``, a torch dtype
    by its name (they act in ``fit`` only), settings as the record of their fields."""
    params = est.get_params(deep=False)
    for name, cls in _settings_params().items():
        if isinstance(params.get(name), cls):
            params[name] = dataclasses.asdict(params[name])
    params["callback"] = None
    if not (params["random_state"] is None or isinstance(params["random_state"], int | np.integer)):
        params["random_state"] = None
    if not isinstance(params["dtype"], str):
        params["dtype"] = str(params["dtype"]).removeprefix("torch.")
    return params


def save_model(estimator, path: str | os.PathLike, *, info: dict | None = None) -> None:
    """Save a fitted :class:`~attnclust.AttentionClustering` to ``path`` (a ``.npz``
    archive, no pickle), atomically: an interrupted save leaves no partial file.

    Parameters
    ----------
    estimator : AttentionClustering
        A fitted estimator (``fit`` or ``partial_fit``).
    path : path of the file to write (``.npz`` is the usual suffix)
    info : dict, optional
        JSON values kept beside the model (the command line records the data file and
        the columns it was fitted on); :func:`model_info` reads them back.

    Raises
    ------
    ValueError
        ``estimator`` is not fitted, or ``path`` cannot be written (a file in the way of
        its folder, no permission, a full disk): one line naming ``path``; nothing is
        written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from attnclust import AttentionClustering
    >>> X = np.random.default_rng(0).standard_normal((60, 2))
    >>> est = AttentionClustering(2, random_state=0).fit(X)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.npz"
    >>> save_model(est, path)
    >>> (load_model(path).predict(X) == est.predict(X)).all()
    np.True_
    """
    from .._atomic import atomic_path

    with atomic_path(path) as tmp:
        write_model(estimator, tmp, info=info)


def write_model(estimator, path: str | os.PathLike, *, info: dict | None = None) -> None:
    """:func:`save_model`, not atomic (for a caller that stages its files itself)."""
    from .. import __version__

    if not hasattr(estimator, "cluster_centers_") or not hasattr(estimator, "_plan"):
        raise ValueError(f"{type(estimator).__name__} is not fitted: call fit before "
                         "save_model")
    fitted = {name: value for name, value in vars(estimator).items()
              if name.endswith("_") and not name.startswith("_")}
    meta: dict = {"format": FORMAT, "format_version": FORMAT_VERSION,
                  "attnclust_version": __version__, "class": type(estimator).__name__,
                  "info": _json_value(info or {}), "not_saved": []}
    arrays: dict[str, np.ndarray] = {}
    _split(_saved_params(estimator), "param", "params", meta, arrays)
    _split(fitted, "attr", "attributes", meta, arrays)
    meta["sha256"] = _digest(meta, arrays)
    # through an open handle: np.savez given a name would append .npz to another suffix
    with open(path, "wb") as f:
        np.savez(f, **{_META: np.array(json.dumps(meta))}, **arrays)


# the first bytes of a zip archive (an .npz): a file that starts so and cannot be read is
# a damaged model file, not some other file
_ZIP = b"PK\x03\x04"


def _refuse(path, why: str) -> ValueError:
    return ValueError(f"{path}: not an attnclust model file ({why}); write one with "
                      "attnclust fit or attnclust.cluster.model_file.save_model")


def _unread(exc: Exception) -> str:
    """Why NumPy could not read a model file, in words (not its advice to unpickle)."""
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "contains pickled" in why:          # NumPy's words for a file it cannot read as data
        return "not a NumPy .npz archive"
    if "Object arrays" in why:
        return "it holds object arrays, which only pickle reads"
    return why


def _open(path: Path):
    """What NumPy reads from the file (an ``NpzFile``, closed, or an array) and the
    arrays of an archive; one line where it cannot be read, saying whether the file may
    not be read, is a damaged archive or is no archive at all."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a model file")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:          # a model, maybe, that may not be read (no permission)
        raise ValueError(f"{path}: cannot read the model file "
                         f"({exc.strerror or exc})") from None
    entries: dict[str, np.ndarray] = {}
    with f:                         # closed here also when NumPy cannot read the archive
        try:
            archive = np.load(f, allow_pickle=False)
            if isinstance(archive, np.lib.npyio.NpzFile):
                with archive:
                    entries = {name: archive[name] for name in archive.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            f.seek(0)
            if f.read(4) == _ZIP:       # an archive cut short or damaged, not another file
                raise ValueError(f"{path}: the model file is damaged or truncated "
                                 f"({_unread(exc)}); write it again with attnclust fit or "
                                 "save_model") from None
            raise _refuse(path, _unread(exc)) from None
    return archive, entries


def _read(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The metadata and the arrays of the file, checked against its digest."""
    archive, entries = _open(path)
    if not isinstance(archive, np.lib.npyio.NpzFile):          # a .npy: one array
        raise _refuse(path, "one array, not an archive")
    if any(not isinstance(v, np.ndarray) for v in entries.values()):
        raise _refuse(path, "a member that is not an array")
    if _META not in entries:
        raise _refuse(path, f"no {_META}")
    try:
        meta = json.loads(str(entries.pop(_META)))
    except ValueError:
        raise _refuse(path, f"{_META} is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _refuse(path, "unknown format")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: model file format version {meta.get('format_version')!r}, "
                         f"this attnclust reads version {FORMAT_VERSION}; refit the model "
                         "with this version (attnclust fit)")
    if meta.get("sha256") != _digest(meta, entries):
        raise ValueError(f"{path}: the model file was changed after it was written (its "
                         "SHA-256 digest does not match); refit or restore the file")
    return meta, entries


def _values(meta: dict, arrays: dict, prefix: str, meta_key: str) -> dict:
    """The values of one kind (``param`` or ``attr``) read back from the file."""
    values = dict(meta[meta_key])
    for key, array in arrays.items():
        kind, _, name = key.partition(".")
        if kind != prefix:
            continue
        if key in meta.get("scalars", []):
            array = array[()]
        elif key in meta.get("object_arrays", []):
            array = array.astype(object)
        values[name] = array
    return values


def load_model(path: str | os.PathLike):
    """The :class:`~attnclust.AttentionClustering` saved by :func:`save_model` at ``path``.

    Its parameters, fitted attributes and plan of prediction are those of the estimator
    saved: ``predict``, ``predict_proba``, ``transform`` and ``score`` give the same values.

    Raises
    ------
    ValueError
        One line: no such file, a file that cannot be read (no permission), a damaged
        or truncated model file, not a model file, a file of another format version, a
        file changed since it was written (its digest does not match), or one whose
        fitted attributes disagree (a file edited by hand, its digest written again).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from attnclust import AttentionClustering
    >>> X = np.random.default_rng(1).standard_normal((80, 3))
    >>> est = AttentionClustering(3, covariance_type="diag", random_state=0).fit(X)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.npz"
    >>> save_model(est, path)
    >>> loaded = load_model(path)
    >>> loaded.covariance_type_, np.array_equal(loaded.predict_proba(X), est.predict_proba(X))
    ('diag', True)
    """
    from .clustering import AttentionClustering

    path = Path(path)
    meta, arrays = _read(path)
    if meta.get("class") != AttentionClustering.__name__:
        raise _refuse(path, f"a {meta.get('class')!r}, not an AttentionClustering")
    try:
        params = _values(meta, arrays, "param", "params")
        for name, cls in _settings_params().items():
            if isinstance(params.get(name), dict):      # a record of the settings' fields
                params[name] = cls(**params[name])
        est = AttentionClustering(**params)
        _portable(est, path)
        for name, value in _values(meta, arrays, "attr", "attributes").items():
            if not (name.isidentifier() and name.endswith("_") and not name.startswith("_")):
                raise ValueError(f"{name!r} is no fitted attribute")   # not a method's name
            setattr(est, name, value)
        est._plan = _plan(est)
    except (TypeError, ValueError, KeyError) as exc:
        raise _refuse(path, f"its parameters do not make an estimator: {exc}") from None
    why = _disagreement(est)
    if why:
        raise _refuse(path, f"its fitted attributes disagree: {why}")
    return est


def _portable(est, path: Path) -> None:
    """A model fitted on a device this machine lacks (``"cuda"`` on a laptop) predicts on
    the CPU, with a warning: its arrays are NumPy's, on no device."""
    from .._validation import check_device

    try:
        check_device(est.device)
    except ValueError:
        warnings.warn(f"{path}: fitted with device={est.device!r}, which this machine does "
                      "not have; it predicts on the CPU (device='cpu')", UserWarning,
                      stacklevel=user_stacklevel())
        est.set_params(device="cpu")


def _disagreement(est) -> str:
    """What a loaded estimator's fitted attributes lack or where their shapes disagree (a
    file edited by hand, its digest written again), in words; ``""``: nothing."""
    d = getattr(est, "n_features_in_", None)
    centers = getattr(est, "cluster_centers_", None)
    if d is None or centers is None:
        return "no cluster_centers_ or n_features_in_"
    for name in ("cluster_centers_", "heads_"):
        value = getattr(est, name, None)
        if value is not None and (np.ndim(value) != 2 or np.shape(value)[1] != d
                                  or not len(value) or not np.all(np.isfinite(value))):
            return (f"{name} of shape {np.shape(value)}, not (K >= 1, n_features_in_ = {d}) "
                    "finite numbers")
    lam = getattr(est, "inverse_temperature_", 1.0)
    if not (isinstance(lam, (int, float, np.floating)) and 0 < lam < np.inf):
        return f"inverse_temperature_ = {lam!r}, not a finite number > 0"
    K = len(centers)
    if getattr(est, "n_clusters_", K) != K:
        return f"n_clusters_ = {est.n_clusters_!r} for {K} cluster_centers_"
    if getattr(est, "merge_heads_", False):
        return _merged_disagreement(est, K)
    if est._plan.covariance.shaped:
        return _shaped_disagreement(est, K, d)
    return ""


def _shaped_disagreement(est, K: int, d: int) -> str:
    """Where a shaped fit's arrays disagree with its ``K`` heads of ``d`` features, or
    ``""``."""
    full = est._plan.covariance.joint
    shapes = {"precisions_cholesky_": (K, d, d) if full else (K, d), "weights_": (K,),
              "covariance_floor_": (d,)}
    for name, shape in shapes.items():
        value = getattr(est, name, None)
        if value is None or np.shape(value) != shape or not np.all(np.isfinite(value)):
            return (f"a {est._plan.covariance.name} fit's {name} of shape "
                    f"{np.shape(value) if value is not None else None}, not {shape} finite "
                    "numbers")
    if not np.all(np.asarray(est.weights_) > 0):
        return "a shaped fit's weights_ not all > 0"
    return ""


def _merged_disagreement(est, K: int) -> str:
    """Where a merged fit's heads (``heads_``, ``head_labels_``) disagree, or ``""``."""
    heads, labels = getattr(est, "heads_", None), getattr(est, "head_labels_", None)
    if heads is None or labels is None:
        return "merge_heads_ is True without heads_ and head_labels_"
    labels = np.asarray(labels)
    if (labels.dtype.kind not in "iu" or labels.shape != (len(heads),)
            or not np.array_equal(np.unique(labels), np.arange(K))):
        return (f"head_labels_ of shape {labels.shape} and dtype {labels.dtype}, not the "
                f"cluster (0..{K - 1}, each one's) of each of the {len(heads)} heads_")
    return ""


def _plan(est):
    """The plan of the fit's predictions, resolved again as ``fit`` resolves it: the
    parameters' plan, for the fitted number of heads and the chosen shape."""
    from .estimator_params import parameters
    from .mixture.covariance import as_covariance_type
    from .plan import resolve

    with warnings.catch_warnings():     # a deprecated parameter warned when it was fitted
        warnings.simplefilter("ignore", FutureWarning)
        plan = resolve(parameters(est))
    if hasattr(est, "n_clusters_"):
        plan = plan.with_clusters(est.n_clusters_)
    if hasattr(est, "covariance_type_"):
        plan = plan.with_covariance(as_covariance_type(est.covariance_type_))
    return plan


def model_info(path: str | os.PathLike) -> dict:
    """The ``info`` saved with the model at ``path`` (checked as :func:`load_model` checks
    the file)."""
    return _read(Path(path))[0].get("info", {})

