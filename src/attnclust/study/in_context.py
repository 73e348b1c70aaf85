"""The parameter-free attention layer: in-context quantization.

Query, key and value matrices are the identity. For a prompt ``X`` of ``L`` tokens,

    Q_lambda(X)_i = sum_j softmax_j( lambda * <X_i, X_j> ) X_j

so every output is a convex combination of the prompt's own tokens, weighted towards
the tokens that look like it: the centroids are read off the prompt itself. Options:
exclude the token itself (``j != i``), apply the layer ``n_steps`` times (the
self-attention dynamics, optionally renormalizing tokens to the sphere after each step).

Infinite-prompt limit. When the ``L`` tokens are i.i.d. from the mixture, the law of
large numbers turns the sums into expectations; for ``X | Z=k ~ N(mu*_k, sigma^2 I)``
Gaussian tilting gives ``E[e^{lambda <x, X>} | k] = e^{lambda <x, mu*_k> +
lambda^2 sigma^2 ||x||^2 / 2}`` and ``E[X e^{lambda <x, X>} | k] = (mu*_k + lambda
sigma^2 x) E[e^{lambda <x, X>} | k]``, hence

    Q_inf(x) = lambda sigma^2 x + sum_k softmax_k( log pi_k + lambda <x, mu*_k> ) mu*_k.

A finite prompt is a Monte Carlo estimate of the two expectations (a self-normalized
one), so ``Q_lambda(X)_i - Q_inf(X_i)`` is of order ``1 / sqrt(L)``.

Backends (all give the same numbers; ``"auto"`` picks the fastest valid one):

- ``dense``: the reference, materializes the ``L x L`` score matrix per prompt.
- ``fused``: ``torch.nn.functional.scaled_dot_product_attention`` with
  ``scale=lambda`` on a contiguous ``(B, 1, L, d)`` view, restricted to the kernels
  that never build an ``L x L`` matrix (flash on CPU; flash or memory-efficient on
  CUDA). It raises instead of silently falling back to the ``L x L`` math kernel, so
  it refuses ``exclude_self`` (which would need an ``L x L`` mask) and CUDA float64.
- ``chunked``: online softmax over blocks of queries and keys in plain PyTorch, memory
  ``O(chunk_q * chunk_k + L d)``; handles ``exclude_self`` and any dtype/device.

Resources and overflow. ``dense`` refuses up front, with the size it needs and the
backends that would fit, when its ``L x L`` matrices exceed the memory available (free
memory of the CUDA device; on the CPU the smaller of the system's available memory and
the cgroup limit of a container). Scores ``lambda <x_i, x_j>`` beyond the largest number
of the dtype make the softmax undefined: every backend then raises ``ValueError``
instead of returning NaN or inf.

Notation
--------
=================  ==========================  ===========================================
paper              code                        meaning
=================  ==========================  ===========================================
``X``              ``X``                       prompt, ``(L, d)`` or batch ``(B, L, d)``
``lambda``         ``inverse_temperature``             inverse temperature, ``> 0``
``Q_lambda(X)``    ``identity_attention``      output of the layer, same shape as ``X``
``Q_inf(x)``       ``infinite_prompt_limit``   limit of ``Q_lambda(X)_i`` as ``L -> inf``
``mu*_k, pi_k``    ``mix.centroids, weights``  mixture that generated the prompt
``sigma``          ``mix.sigma``               isotropic noise level
=================  ==========================  ===========================================
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .._deprecation import renamed_keywords
from .._validation import as_tensor, check_finite, check_inverse_temperature
from ..layer.sphere import normalize
from .mixture import GaussianMixture

__all__ = [
    "BACKENDS",
    "check_options",
    "dense_bytes",
    "fused_available",
    "identity_attention",
    "infinite_prompt_limit",
]

BACKENDS = ("auto", "dense", "fused", "chunked")

# Score-block budget of the chunked path, in elements: 2**19 floats (2 MiB in float32).
# Measured on an idle 2-core machine at L = 50,000, d = 16, float32: 512 x 1024 blocks
# reach 0.27 of the matmul rate, 1024 x 1024 blocks 0.15, 512 x 512 blocks 0.22.
_BLOCK_ELEMENTS = 2**19
_KEY_BLOCK = 1024
_FUSED_SCORES = 2**26     # query-key scores per call of the fused kernel
# Below this many score elements per batch (B * L * L) ``auto`` uses the dense
# reference for exclude_self: fewer kernel launches than the blocked loop.
_DENSE_AUTO_ELEMENTS = 2**22


# --------------------------------------------------------------------------------------
# identity attention
# --------------------------------------------------------------------------------------
@renamed_keywords(temperature="inverse_temperature")
def identity_attention(
    X,
    inverse_temperature: float,
    *,
    n_steps: int = 1,
    exclude_self: bool = False,
    renormalize: bool = False,
    backend: str = "auto",
    chunk_size: int | tuple[int, int] | None = None,
):
    """Apply the identity attention layer ``Q_lambda`` to a prompt, ``n_steps`` times.

    ``Q_lambda(X)_i = sum_j softmax_j(lambda <X_i, X_j>) X_j`` (``j != i`` with
    ``exclude_self``).

    Parameters
    ----------
    X : array-like or Tensor of shape (L, d) or (B, L, d)
        One prompt or a batch of prompts. NumPy input gives NumPy output (float32 stays
        float32, anything else becomes float64); a tensor gives a tensor on the same
        device with the same dtype.
    inverse_temperature : float
        Inverse temperature ``lambda > 0``.
    n_steps : int, default=1
        Number of repeated applications (the self-attention dynamics).
    exclude_self : bool, default=False
        Leave the token itself out of its own softmax (needs ``L >= 2``).
    renormalize : bool, default=False
        Project tokens back to the unit sphere after each step.
    backend : {"auto", "dense", "fused", "chunked"}, default="auto"
        ``auto`` uses ``fused`` when it can run without an ``L x L`` matrix, else
        ``dense`` for small problems and ``chunked`` otherwise.
    chunk_size : int or (int, int), optional
        Query and key block sizes of the chunked path (one int sets both).

    Returns
    -------
    array or Tensor, same shape as ``X``

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> w = np.exp(1.0) / (np.exp(1.0) + 1.0)
    >>> np.allclose(identity_attention(X, 1.0), [[w, 1 - w], [1 - w, w]])
    True
    >>> identity_attention(X, 1.0, exclude_self=True)
    array([[0., 1.],
           [1., 0.]])
    """
    lam = check_inverse_temperature(inverse_temperature)
    cq, ck = check_options(n_steps, exclude_self, renormalize, backend, chunk_size)
    is_tensor = isinstance(X, torch.Tensor)
    keep_f32 = not is_tensor and getattr(X, "dtype", None) == np.float32
    x = as_tensor(X, name="X", dtype=torch.float32 if keep_f32 else None)
    if x.ndim not in (2, 3):
        raise ValueError(f"X must have shape (L, d) or (B, L, d), got ndim={x.ndim} "
                         f"(shape {tuple(x.shape)})")
    if x.numel() == 0:
        raise ValueError(f"X is empty (shape {tuple(x.shape)}): a prompt needs at least one "
                         "token of dimension >= 1")
    check_finite(x, "X")
    if exclude_self and x.shape[-2] < 2:
        raise ValueError(f"exclude_self needs a prompt of at least 2 tokens, got L={x.shape[-2]}")

    batched = x.ndim == 3
    y = x if batched else x.unsqueeze(0)  # (B, L, d)
    name = _resolve_backend(backend, y, exclude_self)
    if name == "dense":
        _check_dense_fits(y, exclude_self)
    for step in range(int(n_steps)):
        if name == "dense":
            y = _dense(y, lam, exclude_self)
        elif name == "fused":
            y = _fused(y, lam, exclude_self)
        else:
            y = _chunked(y, lam, exclude_self, cq, ck)
        _check_no_overflow(y, x, lam, step)
        if renormalize:
            y = normalize(y)
    y = y if batched else y.squeeze(0)
    return y if is_tensor else y.detach().cpu().numpy()


def fused_available(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether the fused backend has an ``O(L d)``-memory kernel for ``dtype`` on ``device``.

    CPU: the flash kernel (float32, float64, bfloat16, float16). CUDA: flash or
    memory-efficient attention (float16, bfloat16, float32); float64 has only the math
    kernel there.

    Examples
    --------
    >>> import torch
    >>> fused_available(torch.float64, "cpu")
    True
    """
    kind = torch.device(device).type
    if kind == "cpu":
        return dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    if kind == "cuda":
        return dtype in (torch.float32, torch.float16, torch.bfloat16)
    return False


def _resolve_backend(backend: str, y: torch.Tensor, exclude_self: bool) -> str:
    if backend == "fused":
        if exclude_self:
            raise ValueError("backend='fused' cannot exclude the token itself without an L x L "
                             "mask; use backend='chunked' (or 'auto') for exclude_self=True")
        if not fused_available(y.dtype, y.device):
            raise ValueError(f"backend='fused' has no O(L d) kernel for {y.dtype} on "
                             f"{y.device.type}; use backend='chunked'")
    if backend == "chunked" and y.requires_grad and torch.is_grad_enabled():
        raise ValueError("backend='chunked' works in place and does not support autograd; "
                         "use backend='dense' or 'fused' for gradients")
    if backend != "auto":
        return backend
    if not exclude_self and fused_available(y.dtype, y.device):
        return "fused"
    B, L, _ = y.shape
    if B * L * L <= _DENSE_AUTO_ELEMENTS or (y.requires_grad and torch.is_grad_enabled()):
        return "dense"
    return "chunked"


def _available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``; None when it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    limits = []
    try:  # Linux: what the kernel says can be allocated without swapping
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:  # a container's cgroup (v2) limit, which /proc/meminfo does not show
        top = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if top != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            limits.append(int(top) - used)
    except (OSError, ValueError):
        pass
    if not limits and hasattr(os, "sysconf"):
        try:
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return max(min(limits), 0) if limits else None


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


def dense_bytes(shape: tuple[int, ...], dtype: torch.dtype, *, exclude_self: bool = False) -> int:
    """Peak bytes of the ``L x L`` matrices of the dense backend on prompts of ``shape``.

    Two ``(B, L, L)`` arrays of ``dtype`` live at once (the scores and their softmax),
    plus an ``L x L`` boolean mask with ``exclude_self``.

    Examples
    --------
    >>> dense_bytes((1, 100_000, 16), torch.float64) / 1e9
    160.0
    """
    B, L = (1, shape[0]) if len(shape) == 2 else (shape[0], shape[1])
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * B * L * L * itemsize + (L * L if exclude_self else 0)


def _check_dense_fits(y: torch.Tensor, exclude_self: bool) -> None:
    """Refuse the dense backend before it allocates more than the memory available."""
    need = dense_bytes(tuple(y.shape), y.dtype, exclude_self=exclude_self)
    free = _available_memory(y.device)
    if free is None or need <= free:
        return
    fits = ["chunked"] if exclude_self or not fused_available(y.dtype, y.device) \
        else ["fused", "chunked"]
    B, L, _ = y.shape
    raise ValueError(f"backend='dense' needs {_gib(need)} for its L x L matrices (B={B}, "
                     f"L={L}, {str(y.dtype).removeprefix('torch.')}), more than the "
                     f"{_gib(free)} of memory available on {y.device.type}; use "
                     f"backend={' or '.join(repr(b) for b in fits)} (memory O(L d)), or 'auto'")


def _check_no_overflow(y: torch.Tensor, x: torch.Tensor, lam: float, step: int) -> None:
    """``ValueError`` when a step's output is not finite: the scores overflowed the dtype."""
    if bool(torch.isfinite(y).all()):
        return
    biggest = float(x.detach().abs().amax())
    raise ValueError(f"identity attention produced non-finite values (overflow) at step "
                     f"{step + 1}: the scores lambda <x_i, x_j> exceed the largest "
                     f"{str(x.dtype).removeprefix('torch.')} (lambda = {lam:g}, largest "
                     f"|x_ij| = {biggest:g}); rescale X or lower lambda")


def check_options(n_steps, exclude_self, renormalize, backend, chunk_size
                  ) -> tuple[int | None, int | None]:
    """The options of :func:`identity_attention`, checked (booleans must be ``True`` or
    ``False``: ``"no"`` is no ``False``); returns the query and key block sizes.

    Examples
    --------
    >>> check_options(1, False, True, "auto", 256)
    (256, 256)
    >>> check_options(1, "no", False, "auto", None)
    Traceback (most recent call last):
    ...
    ValueError: exclude_self must be True or False, got 'no'
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be an integer >= 1, got {n_steps!r}")
    for name, value in (("exclude_self", exclude_self), ("renormalize", renormalize)):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    return _chunk_sizes(chunk_size)


def _chunk_sizes(chunk_size) -> tuple[int | None, int | None]:
    if chunk_size is None:
        return None, None
    sizes = (chunk_size, chunk_size) if np.ndim(chunk_size) == 0 else tuple(chunk_size)
    if len(sizes) != 2 or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                              or s < 1 for s in sizes):
        raise ValueError(f"chunk_size must be a positive int or a pair of them, got "
                         f"{chunk_size!r}")
    return int(sizes[0]), int(sizes[1])


def _dense(x: torch.Tensor, lam: float, exclude_self: bool) -> torch.Tensor:
    """Reference: the full ``(B, L, L)`` softmax."""
    scores = lam * (x @ x.transpose(-1, -2))  # (B, L, L)
    if exclude_self:
        eye = torch.eye(x.shape[-2], dtype=torch.bool, device=x.device)
        scores = scores.masked_fill(eye, -math.inf)
    return torch.softmax(scores, dim=-1) @ x


def _fused(x: torch.Tensor, lam: float, exclude_self: bool) -> torch.Tensor:
    """Scaled-dot-product attention restricted to the kernels without an L x L matrix."""
    if exclude_self:  # guarded in _resolve_backend; kept for direct callers
        raise ValueError("the fused backend cannot exclude the token itself")
    q = x.unsqueeze(1).contiguous()  # (B, 1, L, d): one head, contiguous for flash
    allowed = [SDPBackend.FLASH_ATTENTION]
    if q.device.type == "cuda":
        allowed.append(SDPBackend.EFFICIENT_ATTENTION)
    # the queries a block of rows at a time, each against every key: one kernel call
    # returns in a fraction of a second, so an interrupt (Ctrl-C) is handled between calls
    # (a single call on 300,000 tokens held it for minutes); each row's attention is the same
    L = q.shape[-2]
    rows = max(1, _FUSED_SCORES // (q.shape[0] * L))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch explains each refusal
            with sdpa_kernel(allowed):
                blocks = [F.scaled_dot_product_attention(q[:, :, s:s + rows], q, q, scale=lam)
                          for s in range(0, L, rows)]
            out = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)
    except RuntimeError as exc:
        raise ValueError(f"backend='fused' found no O(L d) attention kernel for "
                         f"{q.dtype} on {q.device.type}: {exc}") from exc
    return out.squeeze(1)


def _chunked(x: torch.Tensor, lam: float, exclude_self: bool, cq: int | None,
             ck: int | None) -> torch.Tensor:
    """Online softmax over query blocks and key blocks; memory O(cq * ck + L d).

    Each query row keeps ``m`` (the log of its running softmax normalizer) and ``acc``
    (its running weighted sum divided by ``e^m``, with the weight itself in the last
    column, so ``acc[:, d] == 1`` after every block). Scores enter as
    ``lambda <x_i, x_j> - m_i`` straight out of one matmul (``-m_i`` rides in an extra
    column of the queries against a column of ones in the keys), are exponentiated in
    place and multiplied by ``[x_j, 1]``: one matmul, one ``exp`` and one matmul per
    block. As ``m`` is a log-sum-exp it bounds every score seen so far, so the
    exponentials cannot overflow unless a new score exceeds it by ~88 (float32); that
    case, the first block, and rows with no finite score yet take the exact path that
    subtracts the block's row maximum first.
    """
    B, L, d = x.shape
    dev, dt = x.device, x.dtype
    if ck is None:
        ck = min(L, _KEY_BLOCK)
    if cq is None:
        cq = max(1, min(L, _BLOCK_ELEMENTS // (B * ck)))
    ones = torch.ones(B, L, 1, dtype=dt, device=dev)
    keys = torch.cat([x, ones], dim=-1).transpose(1, 2).contiguous()  # (B, d+1, L): [x; 1]
    values = torch.cat([x, ones], dim=-1)  # (B, L, d+1): [x, 1]
    out = torch.empty_like(x)
    with torch.no_grad():
        for q0 in range(0, L, cq):
            q1 = min(q0 + cq, L)
            queries = torch.cat([lam * x[:, q0:q1], torch.zeros(B, q1 - q0, 1, dtype=dt,
                                                                 device=dev)], dim=-1)
            m = torch.full((B, q1 - q0, 1), -math.inf, dtype=dt, device=dev)  # (B, cq, 1)
            acc = torch.zeros(B, q1 - q0, d + 1, dtype=dt, device=dev)  # (B, cq, d+1)
            for k0 in range(0, L, ck):
                k1 = min(k0 + ck, L)
                diag = exclude_self and q0 < k1 and k0 < q1
                contrib = None
                if k0 > 0 and bool(torch.isfinite(m).all()):
                    queries[..., d:] = -m
                    scores = torch.bmm(queries, keys[:, :, k0:k1])  # (B, cq, ck): s - m
                    if diag:
                        scores.diagonal(q0 - k0, -2, -1).fill_(-math.inf)
                    contrib = torch.bmm(scores.exp_(), values[:, k0:k1])  # (B, cq, d+1)
                    if not bool(torch.isfinite(contrib).all()):
                        contrib = None  # overflow: redo this block on the exact path
                    else:
                        acc += contrib
                if contrib is None:
                    acc, m = _exact_block(queries, keys, values, acc, m, d, q0, k0, k1, diag)
                # keep acc's weight column at 1 by moving its log into m
                weight = acc[..., d:]
                seen = weight > 0
                m = torch.where(seen, m + torch.log(torch.where(seen, weight, 1.0)), m)
                acc = torch.where(seen, acc / torch.where(seen, weight, 1.0), acc)
            out[:, q0:q1] = acc[..., :d]
    return out


def _exact_block(queries, keys, values, acc, m, d, q0, k0, k1, diag):
    """One key block of the textbook online softmax (running maximum)."""
    scores = torch.bmm(queries[..., :d], keys[:, :d, k0:k1])  # (B, cq, ck)
    if diag:
        scores.diagonal(q0 - k0, -2, -1).fill_(-math.inf)
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    shift = torch.where(torch.isfinite(m_new), m_new, 0.0)
    scale = torch.exp(m - shift)  # exp(-inf) = 0 for rows with nothing seen yet
    scores.sub_(shift).exp_()
    acc = acc * scale + torch.bmm(scores, values[:, k0:k1])
    return acc, torch.where(torch.isfinite(m_new), shift, m_new)


# --------------------------------------------------------------------------------------
# infinite-prompt limit
# --------------------------------------------------------------------------------------
@renamed_keywords(temperature="inverse_temperature")
def infinite_prompt_limit(x, mix: GaussianMixture, *, inverse_temperature: float):
    """Limit of ``Q_lambda(X)_i`` as the prompt length grows, for a query ``x``.

    ``Q_inf(x) = lambda sigma^2 x + sum_k softmax_k(log pi_k + lambda <x, mu*_k>) mu*_k``.

    Parameters
    ----------
    x : array-like or Tensor of shape (..., d)
    mix : GaussianMixture
        The mixture the prompt's tokens are drawn from.
    inverse_temperature : float
        Inverse temperature ``lambda``.

    Returns
    -------
    array or Tensor of shape (..., d), the type of ``x``

    Examples
    --------
    >>> import attnclust as ac
    >>> mix = ac.GaussianMixture.antipodal(d=2, sigma=0.5)
    >>> infinite_prompt_limit([0.0, 1.0], mix, inverse_temperature=2.0)
    array([0. , 0.5])
    """
    lam = check_inverse_temperature(inverse_temperature)
    if not isinstance(mix, GaussianMixture):
        raise ValueError(f"mix must be a GaussianMixture, got {type(mix).__name__}")
    is_tensor = isinstance(x, torch.Tensor)
    t = as_tensor(x, name="x")
    if t.ndim == 0 or t.shape[-1] != mix.d:
        raise ValueError(f"x must have shape (..., {mix.d}), got {tuple(t.shape)}")
    check_finite(t, "x")
    centroids = as_tensor(mix.centroids, dtype=t.dtype, device=t.device)  # (K, d)
    log_pi = torch.log(as_tensor(mix.weights, dtype=t.dtype, device=t.device))  # (K,)
    post = torch.softmax(log_pi + lam * (t @ centroids.T), dim=-1)  # (..., K)
    out = lam * mix.sigma**2 * t + post @ centroids
    return out if is_tensor else out.detach().cpu().numpy()
