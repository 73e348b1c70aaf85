"""Input checks and conversions shared by the public functions."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

__all__ = [
    "as_flag",
    "as_generator",
    "as_numpy_input",
    "as_tensor",
    "as_torch_dtype",
    "check_constraints",
    "check_device",
    "check_inverse_temperature",
    "check_finite",
    "check_int",
    "check_nonnegative",
    "check_sample_weight",
    "readonly_tensor",
]


def as_generator(rng, name: str = "rng") -> np.random.Generator:
    """A NumPy generator from ``None``, an int seed ``>= 0``, a ``SeedSequence``, a
    generator or a legacy ``RandomState`` (scikit-learn's ``random_state``: a seed is drawn
    from it, so it advances); ``name`` names ``rng`` in the error.

    Examples
    --------
    >>> as_generator(-1, "random_state")
    Traceback (most recent call last):
    ...
    ValueError: random_state must be None, an int >= 0, a numpy Generator or RandomState, got -1
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, np.random.RandomState):
        return np.random.default_rng(rng.randint(2**31 - 1))
    if rng is None or isinstance(rng, np.random.SeedSequence) or (
            isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0):
        return np.random.default_rng(rng)
    shown = repr(rng) if isinstance(rng, (int, np.integer)) else type(rng).__name__
    raise ValueError(f"{name} must be None, an int >= 0, a numpy Generator or RandomState, "
                     f"got {shown}")


def as_tensor(x, *, name: str = "x", dtype=None, device=None) -> torch.Tensor:
    """Convert array-like ``x`` to a floating tensor, keeping a tensor's dtype and device.

    NumPy arrays and lists become float64 unless ``dtype`` says otherwise; complex values
    are refused (a conversion would drop their imaginary parts).

    Examples
    --------
    >>> as_tensor([[1, 2]]).dtype
    torch.float64
    >>> as_tensor(np.array([1 + 1j]), name="X")
    Traceback (most recent call last):
    ...
    ValueError: X must be real, got complex values
    """
    if isinstance(x, torch.Tensor):
        t = x
        if t.is_complex():
            raise ValueError(f"{name} must be real, got complex values")
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype() if dtype is None else dtype)
    else:
        try:                # one conversion; complex values refused, not cast
            a = np.asarray(x)
            if a.dtype.kind != "c":     # copies only what torch cannot wrap (read-only...)
                t = torch.from_numpy(np.require(a.astype(np.float64, copy=False),
                                                requirements="CW"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be numeric, got {type(x).__name__}") from exc
        if a.dtype.kind == "c":
            raise ValueError(f"{name} must be real, got complex values")
    if dtype is not None or device is not None:
        t = t.to(dtype=dtype or t.dtype, device=device or t.device)
    return t


def readonly_tensor(X: np.ndarray) -> torch.Tensor:
    """A tensor on the memory of ``X`` (copied only when not C-contiguous), to be read only.

    ``X`` may be read-only (a read-only memory map, a pandas 3 frame's values): torch wraps
    it all the same but warns that writing to it would be undefined, which callers that
    only read it must not pass on to their users.

    Examples
    --------
    >>> X = np.ones((2, 3))
    >>> X.flags.writeable = False
    >>> readonly_tensor(X).sum().item()
    6.0
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable", category=UserWarning)
        return torch.from_numpy(np.ascontiguousarray(X))


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or inf, naming the first such index.

    Examples
    --------
    >>> check_finite(torch.tensor([[1.0, float("nan")]]), "X")
    Traceback (most recent call last):
    ...
    ValueError: X contains NaN or inf (first at index (0, 1): nan)
    """
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        flat = int(torch.nonzero(~finite.reshape(-1))[0, 0])
        index = tuple(int(i) for i in np.unravel_index(flat, tuple(t.shape)))
        where = index[0] if len(index) == 1 else index
        value = float(t.reshape(-1)[flat])
        raise ValueError(f"{name} contains NaN or inf (first at index {where}: {value})")
    return t


def check_int(value, name: str, minimum: int = 0) -> int:
    """``value`` as an ``int >= minimum``; booleans and non-integers are refused.

    Examples
    --------
    >>> check_int(3, "n", 1)
    3
    >>> check_int(True, "max_iter", 1)
    Traceback (most recent call last):
    ...
    ValueError: max_iter must be an integer >= 1, got True
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_nonnegative(value, name: str) -> float:
    """``value`` as a finite ``float >= 0``; booleans and non-numbers are refused.

    Examples
    --------
    >>> check_nonnegative(0.5, "rho")
    0.5
    >>> check_nonnegative("a", "rho")
    Traceback (most recent call last):
    ...
    ValueError: rho must be a finite number >= 0, got 'a'
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_inverse_temperature(value) -> float:
    """The inverse temperature ``lambda`` as a positive finite float.

    Called on every attention evaluation, so it is a float conversion and a comparison.

    Examples
    --------
    >>> check_inverse_temperature(2)
    2.0
    """
    if isinstance(value, (bool, str)):         # "2" is no number (a string: "auto" only)
        raise ValueError(f"inverse_temperature must be a positive number, got {value!r}")
    try:
        lam = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"inverse_temperature must be a positive number, got {value!r}") from exc
    if not 0.0 < lam < math.inf:  # also false for NaN
        raise ValueError(f"inverse_temperature must be a positive finite number, got {value!r}")
    return lam


def check_device(device, *, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device`` this machine can allocate on, else ``ValueError``.

    One check for every estimator and the command line: a name torch does not know
    (``"foo"``), CUDA where none is available, a CUDA index beyond the devices present,
    or another device type (``"mps"``, ``"meta"``: the code is tested on CPU and CUDA
    only) each give a ``ValueError`` naming ``device``, instead of torch's
    ``AssertionError`` or its list of device types.

    Parameters
    ----------
    device : str or torch.device
    name : str, default="device"
        How the message names the argument (``"--device"`` on the command line).

    Returns
    -------
    torch.device

    Examples
    --------
    >>> check_device("cpu")
    device(type='cpu')
    >>> check_device("foo")
    Traceback (most recent call last):
    ...
    ValueError: device 'foo' is not a torch device; use cpu, cuda or cuda:N
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"{name} {device!r} is not a torch device; use cpu, cuda or "
                         "cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name} {device!r}: CUDA is not available on this machine; "
                             "use cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"{name} {device!r}: no such CUDA device, this machine has "
                             f"{count} (cuda:0 .. cuda:{count - 1})")
        return dev
    # mps, xpu, meta, ...: the estimators and layers are written and tested for CPU and
    # CUDA only (meta tensors hold no data at all)
    raise ValueError(f"{name} {device!r} is not supported; use cpu, cuda or cuda:N")


def as_torch_dtype(dtype, *, name: str = "dtype") -> torch.dtype:
    """``"float32"``/``"float64"`` (or the NumPy or torch dtype) as a torch dtype.

    Examples
    --------
    >>> as_torch_dtype("float32"), as_torch_dtype(np.float64), as_torch_dtype(torch.float32)
    (torch.float32, torch.float64, torch.float32)
    >>> as_torch_dtype("int8")
    Traceback (most recent call last):
    ...
    ValueError: dtype must be 'float32' or 'float64', got 'int8'
    """
    if isinstance(dtype, torch.dtype):
        label = str(dtype).removeprefix("torch.")
    else:
        try:
            label = str(np.dtype(dtype)) if dtype is not None else ""
        except TypeError:
            label = ""
    if label not in ("float32", "float64"):
        raise ValueError(f"{name} must be 'float32' or 'float64', got {dtype!r}")
    return getattr(torch, label)


def as_numpy_input(X):
    """Data for a scikit-learn style ``fit``/``transform``: tensors become NumPy arrays.

    A tensor is detached (so one that requires grad is accepted; no gradient flows
    through an estimator's fit) and moved to the CPU; a float16/bfloat16 tensor becomes
    float32. Anything else is returned unchanged for ``validate_data`` to check.

    Examples
    --------
    >>> as_numpy_input(torch.ones(2, 2, requires_grad=True))
    array([[1., 1.],
           [1., 1.]], dtype=float32)
    """
    if not isinstance(X, torch.Tensor):
        return X
    t = X.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.cpu().resolve_conj().resolve_neg().numpy()


def check_sample_weight(sample_weight, n_samples: int, *,
                        rows_from: int | None = None) -> np.ndarray | None:
    """``sample_weight`` as a float64 array of shape ``(n_samples,)``, or ``None`` for none.

    A number gives every row that weight. Weights must be finite and non-negative; their
    sum may be zero here (a data-parallel rank may hold only rows of weight zero: the fit
    checks the total over all ranks). A bad entry is named by its index, or with
    ``rows_from`` by its row counted from that number (a file's rows, from 1).

    Raises
    ------
    ValueError
        Not numeric, not of shape ``(n_samples,)``, NaN, inf or negative (naming the first
        bad entry).

    Examples
    --------
    >>> check_sample_weight([1, 2, 0], 3)
    array([1., 2., 0.])
    >>> check_sample_weight([1.0, -1.0], 2)
    Traceback (most recent call last):
    ...
    ValueError: sample_weight must be non-negative, got -1.0 at index 1
    """
    if sample_weight is None:
        return None
    if isinstance(sample_weight, torch.Tensor):
        sample_weight = sample_weight.detach().cpu().numpy()
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"sample_weight must be numbers, got "
                         f"{type(sample_weight).__name__}") from None
    if w.ndim == 0:
        w = np.full(n_samples, float(w))
    if w.shape != (n_samples,):
        raise ValueError(f"sample_weight must have shape ({n_samples},), one weight per row, "
                         f"got shape {w.shape}")
    def where(i):
        return f"index {i}" if rows_from is None else f"row {i + rows_from}"
    bad = np.flatnonzero(~np.isfinite(w))
    if bad.size:
        raise ValueError(f"sample_weight must be finite, got {w[bad[0]]} at {where(bad[0])}")
    negative = np.flatnonzero(w < 0)
    if negative.size:
        raise ValueError(f"sample_weight must be non-negative, got {w[negative[0]]} at "
                         f"{where(negative[0])}")
    return w


def as_flag(value):
    """A parameter that may be a boolean (``noise_head``, ``merge_heads``, ...) with
    NumPy's booleans as Python's, which the checks accept; any other value as given.

    Examples
    --------
    >>> as_flag(np.True_) is True, as_flag("auto")
    (True, 'auto')
    """
    return bool(value) if isinstance(value, bool | np.bool_) else value


def _is_constant(value, option) -> bool:
    """Whether ``value`` is the constant ``option`` (None, a bool or a string)."""
    if option is None:
        return value is None
    if isinstance(option, bool):
        return as_flag(value) is option
    return isinstance(value, str) and value == option


def check_constraints(params: dict, constraints: dict) -> None:
    """Check parameters against a declarative table (scikit-learn's
    ``_parameter_constraints`` pattern): one table, checked once in ``fit``.

    ``constraints[name] = (constants, check)``: ``params[name]`` may be one of the
    ``constants`` (``None``, booleans, strings); any other value goes to ``check(value)``,
    which raises a ``ValueError`` naming it (``check=None``: a ``ValueError`` listing the
    constants).

    Examples
    --------
    >>> table = {"solver": (("fixed-point", "pgd"), None),
    ...          "tol": (("auto",), lambda v: check_nonnegative(v, "tol"))}
    >>> check_constraints({"solver": "pgd", "tol": 1e-4}, table)
    >>> check_constraints({"solver": "newton", "tol": "auto"}, table)
    Traceback (most recent call last):
    ...
    ValueError: solver must be 'fixed-point' or 'pgd', got 'newton'
    >>> check_constraints({"solver": "pgd", "tol": -1.0}, table)
    Traceback (most recent call last):
    ...
    ValueError: tol must be 'auto' or a finite number >= 0, got -1.0
    """
    for name, (constants, check) in constraints.items():
        value = params[name]
        if any(_is_constant(value, option) for option in constants):
            continue
        if check is None:
            listed = ", ".join(map(repr, constants[:-1])) + f" or {constants[-1]!r}"
            raise ValueError(f"{name} must be {listed}, got {value!r}")
        try:
            check(value)
        except ValueError as exc:     # "<name> must be <what>, got <value>": add the constants
            must = f"{name} must be "
            if not constants or not str(exc).startswith(must):
                raise
            listed = " or ".join(repr(c) for c in constants)
            raise ValueError(must + f"{listed} or " + str(exc)[len(must):]) from None
