"""Atomic writes: an interrupted or failed run never leaves a partial output file.

Every output is first written to a hidden temporary file next to its target, then renamed
onto it (``os.replace``: atomic within a file system) once complete: :func:`atomic_path`
for one file, :func:`save_matrices` for a set of files, all or nothing.
:func:`writable_folder` checks that a folder takes files before any long work, and
removes the folders it made if that work fails.

Interrupts. Every temporary file is created through :func:`_temp_next_to`, which records it
until it is renamed or removed, so the command line can remove whatever a signal left
behind (:func:`remove_temporaries`). Sections that must not be cut in the middle (creating
and recording a temporary file, renaming a set of outputs) run under
:func:`deferred_interrupts`: an interrupt raised through :func:`interrupt` while one runs
takes effect when it ends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["WithHeader", "atomic_path", "deferred_interrupts", "interrupt",
           "remove_temporaries", "save_matrices", "save_matrix", "writable_folder"]

# errors of a file system that is full (or a quota reached): named as such, with the path
_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class WithHeader(NamedTuple):
    """An array and the names of its columns: the header line of its ``.csv`` (its
    ``.npy`` holds the array alone)."""

    array: object
    columns: Sequence[str]


def _disk_full(exc: OSError, path: Path) -> bool:
    """Whether ``exc``, raised while writing ``path``, means that its file system is full
    (NumPy's own writes report a short write without an errno: then the free space
    tells)."""
    if exc.errno in _FULL:
        return True
    if exc.errno is None:
        with contextlib.suppress(OSError):
            return shutil.disk_usage(path.parent).free == 0
    return False


def _write_error(exc: OSError, path: Path, left: list[str] | None = None, *,
                 removing: bool = False) -> Exception:
    """One line for a failed write (``removing``: removal) of ``path``: a full disk said
    so, with the path; ``left``: the files a failed set of renames could not put back,
    else nothing was written."""
    done = "nothing was written" if not left else \
        "written anyway, not put back: " + "; ".join(left)
    if _disk_full(exc, path):
        return ValueError(f"{path}: no space left on the device (the disk or quota is "
                          f"full); free some space or write elsewhere (--out); {done}")
    return ValueError(f"{path}: cannot {'remove' if removing else 'write'} "
                      f"({exc.strerror or exc}); {done}")

# temporary files created and not yet renamed or removed (see remove_temporaries)
_LIVE_TEMPS: set[Path] = set()
# depth of nested deferred_interrupts blocks, and the interrupt that arrived inside one
_DEFER = {"depth": 0, "pending": None}


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Run a block that an :func:`interrupt` must not cut; the interrupt fires at its end."""
    _DEFER["depth"] += 1
    try:
        yield
    finally:
        _DEFER["depth"] -= 1
        pending = _DEFER["pending"]
        if _DEFER["depth"] == 0 and pending is not None:
            _DEFER["pending"] = None
            pending()


def interrupt(raise_it: Callable[[], None]) -> None:
    """Call ``raise_it`` now, or when the running :func:`deferred_interrupts` block ends.

    For signal handlers: ``raise_it`` raises the exception that stops the program.
    """
    if _DEFER["depth"]:
        _DEFER["pending"] = raise_it
    else:
        raise_it()


def remove_temporaries() -> list[Path]:
    """Remove every temporary file this process created and has not renamed; return them."""
    removed = sorted(_LIVE_TEMPS)
    for tmp in removed:
        tmp.unlink(missing_ok=True)
    _LIVE_TEMPS.clear()
    return removed


def _discard(tmp: Path) -> None:
    tmp.unlink(missing_ok=True)
    _LIVE_TEMPS.discard(tmp)


def _file_mode(path: Path) -> int:
    """Permission bits for a new output: those of an existing ``path``, else ``0o666 & ~umask``.

    ``tempfile.mkstemp`` creates files readable by their owner only; an output file should
    have the permissions an ordinary ``open(path, "w")`` would give it.
    """
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        pass
    old = os.umask(0)          # the only portable way to read the umask is to set it
    os.umask(old)
    return 0o666 & ~old


def _temp_next_to(path: Path) -> Path:
    """Create an empty hidden temporary file in ``path``'s folder, with its suffix in lower case.

    Writers that look at the extension (``numpy.save`` appends ``.npy`` unless the name ends
    in exactly ``.npy``; ``matplotlib`` picks the format by suffix) see the suffix they expect.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with deferred_interrupts():   # an interrupt between creating and recording would leak it
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.",
                                   suffix=f".tmp{path.suffix.lower()}", dir=path.parent)
        _LIVE_TEMPS.add(Path(tmp))
    os.close(fd)
    return Path(tmp)


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, outermost first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


@contextlib.contextmanager
def writable_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Check that files can be created in ``folder`` (making it), before any long work.

    Missing folders are created; if the block raises (an error, an interrupt), those of
    them that are still empty are removed again, so a failed command leaves the file
    system as it found it.

    Raises
    ------
    ValueError
        ``folder`` (or a parent) is a file, or a file cannot be created in it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> with writable_folder(base / "a" / "b"):
    ...     pass
    >>> (base / "a" / "b").is_dir()
    True
    """
    folder = Path(folder)
    created = _missing_folders(folder)
    try:
        try:
            for f in created:
                f.mkdir()
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ValueError(f"{folder}: cannot write there ({_reason(exc)})") from None
        yield folder
    except BaseException:
        with deferred_interrupts():
            # this process's temporary files in them go first (an interrupt can leave one
            # staged there, which the command removes only after this): else a folder made
            # here stays, empty once they are gone
            for tmp in [t for t in _LIVE_TEMPS if any(f in t.parents for f in created)]:
                with contextlib.suppress(OSError):
                    _discard(tmp)
            for f in reversed(created):
                with contextlib.suppress(OSError):
                    f.rmdir()   # only if empty: never removes what someone else put there
        raise


def _reason(exc: OSError) -> str:
    """Why a file or folder cannot be created, in words (a file where a folder should be
    is "in the way")."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return "a file is in the way"
    return exc.strerror or type(exc).__name__


def _staged_temp(path: Path) -> Path:
    """:func:`_temp_next_to`, its failure one line naming ``path`` (not the temporary)."""
    try:
        return _temp_next_to(path)
    except OSError as exc:
        raise ValueError(f"{path}: cannot write there ({_reason(exc)}); nothing was "
                         "written") from None


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, cannot write a file there")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    The temporary file keeps ``path``'s suffix in lower case (so writers that look at the
    extension, like ``numpy.save`` or ``matplotlib``, behave), gets the permissions a plain
    ``open(path, "w")`` would give (``0o666`` less the umask, or those of the file it
    replaces), and is removed if the block raises.

    Raises
    ------
    ValueError
        ``path`` is a folder, its folder cannot hold a file (a file in the way, no
        permission), or the write of the temporary file or the rename fails (a full
        disk): one line naming ``path``; the block's errors about other files pass
        through.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
    >>> with atomic_path(path) as tmp:
    ...     _ = tmp.write_text("done")
    >>> path.read_text()
    'done'
    """
    path = Path(path)
    _check_target(path)
    tmp = _staged_temp(path)
    try:
        try:
            yield tmp
        except OSError as exc:   # the block's write of tmp (a full disk), not its other files
            if exc.filename not in (None, str(tmp)):
                raise
            raise _write_error(exc, path) from None
        try:
            os.chmod(tmp, _file_mode(path))
            with deferred_interrupts():
                os.replace(tmp, path)
                _LIVE_TEMPS.discard(tmp)
        except OSError as exc:   # a file system that refuses the rename
            raise _write_error(exc, path) from None
    finally:
        _discard(tmp)


def save_matrices(outputs: Mapping[str | os.PathLike, object], *,
                  before_rename: Callable[[], None] | None = None,
                  remove: Iterable[str | os.PathLike] = ()) -> None:
    """Write every ``path -> array`` (by suffix, see :func:`save_matrix`), all or nothing.

    A value may also be a function that writes its file at the path it is given (a
    temporary path with the target's suffix), such as ``lambda p: fig.savefig(p)``.

    Every array is first written to a temporary file next to its target; only when all of
    them are written are they renamed, in one loop, onto their targets. If anything fails,
    every temporary file is removed, and so is every target this call had already created.
    The renames run under :func:`deferred_interrupts`, so an interrupt cannot leave half of
    the outputs renamed.

    ``before_rename`` is called once every file is staged and before any rename (the
    command line prints its summary there): if it raises, nothing is written.
    ``remove``: files removed with the renames, all or nothing with them (the outputs of
    an earlier run that this one does not write); one that cannot be removed fails the
    call, and every file removed or renamed is put back.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> save_matrices({folder / "a.npy": np.eye(2), folder / "a.csv": np.eye(2)})
    >>> sorted(p.name for p in folder.iterdir())
    ['a.csv', 'a.npy']
    """
    targets = [(Path(path), array) for path, array in outputs.items()]
    for path, _ in targets:
        _check_target(path)
    staged: list[tuple[Path, Path]] = []
    try:
        for path, array in targets:
            tmp = _staged_temp(path)
            staged.append((tmp, path))
            try:
                if callable(array):     # a writer of its own format (a figure)
                    array(tmp)
                else:
                    save_matrix(array, tmp)
            except OSError as exc:
                raise _write_error(exc, path) from None
            os.chmod(tmp, _file_mode(path))
        if before_rename is not None:
            before_rename()
        with deferred_interrupts():
            _rename_all(staged, [Path(p) for p in remove if os.path.lexists(p)])
    finally:
        with deferred_interrupts():     # a signal must not cut the cleanup short
            for tmp, _ in staged:
                _discard(tmp)


def _rename_all(staged: list[tuple[Path, Path]], removed: Sequence[Path] = ()) -> None:
    """Set every path of ``removed`` aside (renamed beside it), then rename every ``(tmp,
    path)``; on a failure put every target back as it was: those set aside renamed back,
    those created here removed, those replaced restored from the hard links made before
    each rename; once all are renamed, those set aside are removed. The failure is one
    line naming its target, and any target that could not be put back (a file system
    without hard links, a restore refused: its earlier version then kept under a
    temporary name beside it)."""
    created: list[Path] = []
    kept: list[tuple[Path | None, Path]] = []   # (hard link to the old file or None, target)
    path, removing = None, True
    try:
        for path in removed:
            kept.append((_set_aside(path), path))
        removing = False
        for tmp, path in staged:
            existed = path.exists()
            if existed:
                kept.append((_linked_copy(path), path))
            try:
                os.replace(tmp, path)
            except BaseException:
                if existed:                       # this target was not replaced
                    old = kept.pop()[0]
                    if old is not None:
                        _discard(old)
                raise
            _LIVE_TEMPS.discard(tmp)
            if not existed:
                created.append(path)
    except BaseException as exc:
        left = _put_back(created, kept)
        kept.clear()                     # restored, or the only copies of the old files
        if isinstance(exc, OSError):
            raise _write_error(exc, path, left, removing=removing) from None
        raise
    finally:
        for old, _ in kept:              # renamed: the old files' links are not needed
            if old is not None:
                _discard(old)


def _set_aside(path: Path) -> Path:
    """``path`` renamed to a temporary name beside it (no hard link needed to restore it)."""
    aside = _temp_next_to(path)
    try:
        os.replace(path, aside)
    except BaseException:
        _discard(aside)
        raise
    return aside


def _put_back(created: list[Path], kept: list[tuple[Path | None, Path]]) -> list[str]:
    """Remove the targets ``created``, restore those replaced from their ``kept`` links;
    what could not be undone, in words."""
    left = []
    for path in created:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            left.append(str(path))
    for old, path in kept:
        if old is None:
            left.append(f"{path} (no hard link to restore it from)")
            continue
        try:
            os.replace(old, path)
            _LIVE_TEMPS.discard(old)
        except OSError:
            _LIVE_TEMPS.discard(old)            # the only copy now: kept, named
            left.append(f"{path} (its earlier version is {old})")
    return left


def _linked_copy(path: Path) -> Path | None:
    """A hard link to ``path`` under a temporary name next to it, or ``None`` where the
    file system refuses one (the file then cannot be restored after a failed rename)."""
    tmp = _temp_next_to(path)
    try:
        tmp.unlink()
        os.link(path, tmp)
    except OSError:
        _discard(tmp)
        return None
    return tmp


def save_matrix(X, path: str | os.PathLike) -> None:
    """Write ``X`` to ``path`` as ``.npy`` or ``.csv`` (by suffix, any case); not atomic.

    ``X`` may be a :class:`WithHeader`: its column names are then the first line of the
    ``.csv`` (the ``.npy`` holds the array alone). The file is written through an open
    handle, so the name is used exactly as given (``numpy.save`` given a name would
    append ``.npy`` to ``q.NPY``), and its bytes by Python's writes, so a full disk is an
    ``OSError`` with its errno.
    """
    path = Path(path)
    columns = None
    if isinstance(X, WithHeader):
        X, columns = X
    X = np.asarray(X)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        with open(path, "wb") as f:
            _write_npy(f, X)
    elif suffix == ".csv":
        with open(path, "w", encoding="utf-8", newline="") as f:
            if columns is not None:
                f.write(",".join(_csv_name(c) for c in columns) + "\n")
            write_csv_rows(f, X)
    else:
        raise ValueError(f"{path}: unsupported output type {path.suffix or '(none)'!r}; "
                         "use .npy or .csv")


def _write_npy(f, X: np.ndarray, *, block_bytes: int = 1 << 24) -> None:
    """``np.save`` to the open file ``f``, the data in blocks of Python writes."""
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(X))
    flat = np.ravel(X, order="F" if np.isfortran(X) and X.ndim > 1 else "C")
    step = max(1, block_bytes // max(X.itemsize, 1))
    for start in range(0, flat.size, step):
        f.write(np.ascontiguousarray(flat[start:start + step]).tobytes())


def write_csv_rows(f, X: np.ndarray) -> None:
    """The rows of ``X`` (a vector: one value a line) as CSV lines: integers as such,
    floats with 17 significant digits (they read back exactly)."""
    X = X if X.ndim == 2 else X[:, None]
    if np.issubdtype(X.dtype, np.integer) or X.dtype == bool:
        for start in range(0, X.shape[0], 1 << 16):     # far faster than savetxt's "%d"
            block = X[start:start + (1 << 16)].astype(np.int64).tolist()
            f.write("".join(",".join(map(str, row)) + "\n" for row in block))
        return
    np.savetxt(f, X, delimiter=",", fmt="%.17g")


def _csv_name(name) -> str:
    """A column name as a CSV cell (quoted when it holds a comma or a quote)."""
    name = str(name)
    if any(c in name for c in ',"\n'):
        return '"' + name.replace('"', '""') + '"'
    return name
