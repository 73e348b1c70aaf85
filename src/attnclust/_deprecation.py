"""Old names kept for one release: keyword arguments and attributes that were renamed.

In 0.2 ``temperature`` became ``inverse_temperature`` (``lambda`` multiplies the logits,
so larger is sharper) and ``assignment_error``'s ``mixture`` became ``mix`` (the name of a
mixture everywhere else); the old names still work, until 0.5, and warn with a
``FutureWarning``: as keywords, as attributes, and through an estimator's ``set_params``
(so parameter grids written for 0.1, as in ``GridSearchCV``, keep working).
In 0.3 the module ``attnclust.pgd`` became ``attnclust.study.descent`` (``attnclust.pgd`` is
the function); ``from attnclust.pgd import name`` still works and warns. The modules of 0.2
moved into ``attnclust.study`` and ``attnclust.cluster``: their old paths import the new
modules, with a warning (:class:`MovedModules`). In 0.4 the layer's base moved from
``attnclust.study`` to ``attnclust.layer``, and the clusterer's families into subpackages
(``attnclust.cluster.mixture``, ``attnclust.cluster.choice``, ``attnclust.plotting``); their
0.3 paths work, with a warning, until 0.5.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import types
import warnings

__all__ = ["REMOVED_IN", "MovedModules", "RenamedAttribute", "RenamedParamsMixin",
           "moved_module", "renamed_keywords", "warn_deprecated"]

# the release that drops the old names
REMOVED_IN = "0.5"   # deprecated in 0.2, kept one release more than first said


def _warn(old: str, new: str, where: str, stacklevel: int) -> None:
    warn_deprecated(f"{where}: {old!r} is deprecated and will be removed in {REMOVED_IN}; "
                    f"use {new!r} (the same value)", stacklevel=stacklevel + 1)


def _renamed(kwargs: dict, renames: dict, where: str, error: type[Exception]) -> dict:
    """``kwargs`` with each old name of ``renames`` replaced by its new one, warning once per
    old name for the caller of the caller; ``error`` when both names are given."""
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise error(f"{where} got both {new!r} and its deprecated name {old!r}")
            _warn(old, new, where, stacklevel=3)
            kwargs[new] = kwargs.pop(old)
    return kwargs


def renamed_keywords(**renames: str):
    """Decorator: accept each ``old=...`` keyword as its ``new`` name, with a warning.

    The wrapped function's signature (``inspect.signature``, hence scikit-learn's
    ``get_params``) shows only the new names.

    Examples
    --------
    >>> import warnings
    >>> @renamed_keywords(temperature="inverse_temperature")
    ... def f(x, *, inverse_temperature=1.0):
    ...     return x * inverse_temperature
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     f(2.0, temperature=3.0), caught[0].category.__name__
    (6.0, 'FutureWarning')
    """
    def decorate(fn):
        name = fn.__qualname__.replace(".__init__", "")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **_renamed(kwargs, renames, f"{name}()", TypeError))
        wrapper.renamed_keywords = dict(renames)   # read by RenamedParamsMixin.set_params
        return wrapper
    return decorate


class RenamedAttribute:
    """Class attribute ``old``: reading ``obj.old`` warns and returns ``obj.new``.

    Examples
    --------
    >>> class Fitted:
    ...     temperature_ = RenamedAttribute("temperature_", "inverse_temperature_")
    ...     inverse_temperature_ = 2.0
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     Fitted().temperature_
    2.0
    """

    def __init__(self, old: str, new: str):
        # named here, not by ``__set_name__``, which a NamedTuple does not call on 3.11
        self.old, self.new = old, new

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        value = getattr(obj, self.new)      # AttributeError first, e.g. when not fitted
        _warn(self.old, self.new, type(obj).__name__, stacklevel=2)   # the reader's line
        return value


class RenamedParamsMixin:
    """``set_params`` that also takes the old names of ``__init__``'s renamed keywords.

    Put it before ``BaseEstimator`` in the bases of an estimator whose ``__init__`` is
    decorated by :func:`renamed_keywords`; scikit-learn's ``clone``, pipelines and
    ``GridSearchCV`` set parameters through ``set_params``.

    Examples
    --------
    >>> import warnings
    >>> from sklearn.base import BaseEstimator
    >>> class Est(RenamedParamsMixin, BaseEstimator):
    ...     @renamed_keywords(temperature="inverse_temperature")
    ...     def __init__(self, inverse_temperature=1.0):
    ...         self.inverse_temperature = inverse_temperature
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     Est().set_params(temperature=3.0).inverse_temperature
    3.0
    """

    def set_params(self, **params):
        renames = getattr(type(self).__init__, "renamed_keywords", {})
        return super().set_params(**_renamed(params, renames,
                                             f"{type(self).__name__}.set_params()", ValueError))


def moved_module(old: str, new: types.ModuleType) -> types.ModuleType:
    r"""A stand-in for the module ``old``, whose names now live in ``new``.

    Reading a name from it (``from old import name``) warns with a ``FutureWarning`` and
    gives ``new``'s. Registered in ``sys.modules`` under ``old`` by the package, so that
    importing ``old`` never rebinds the package's attribute of the same name.

    Examples
    --------
    >>> import types, warnings
    >>> new = types.ModuleType("new")
    >>> new.answer = 42
    >>> old = moved_module("old", new)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = old.answer
    >>> value, caught[0].category.__name__
    (42, 'FutureWarning')
    """
    stub = types.ModuleType(old, f"Moved to {new.__name__}; this name is kept until {REMOVED_IN}.")

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        warn_deprecated(f"the module {old} is now {new.__name__}; import {name!r} from there "
                        f"(or from the package); {old} will be removed in {REMOVED_IN}",
                        stacklevel=2)
        return getattr(new, name)

    stub.__getattr__ = __getattr__
    return stub


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Old module paths of a package, imported as the modules that now hold them.

    ``moves`` maps an old path to the new one (``"attnclust.risk"`` to
    ``"attnclust.study.risk"``), kept until the release ``removed_in``; an old path's
    submodules move with it. Importing an old
    path warns with a ``FutureWarning`` and gives the new module itself (one module, so
    ``isinstance`` checks and monkeypatching see one set of names). Installed on
    ``sys.meta_path`` by the package.

    Examples
    --------
    >>> import sys, warnings
    >>> finder = MovedModules({"old_json_path": "json"})
    >>> sys.meta_path.append(finder)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     import old_json_path
    >>> old_json_path is sys.modules["json"], caught[0].category.__name__
    (True, 'FutureWarning')
    >>> sys.meta_path.remove(finder); del sys.modules["old_json_path"]
    """

    def __init__(self, moves: dict[str, str], removed_in: str = REMOVED_IN):
        self.moves, self.removed_in = dict(moves), removed_in

    def new_name(self, old: str) -> str | None:
        """The path that holds the module ``old`` now, or ``None`` if it did not move."""
        for before, after in self.moves.items():
            if old == before or old.startswith(before + "."):
                return after + old[len(before):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        if self.new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = self.new_name(spec.name)
        # the warning skips the import system's frames: it names the importing line
        warn_deprecated(f"the module {spec.name} is now {new}; it will be removed from its "
                        f"old path in {self.removed_in}", stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__    # the import system sets the alias's spec
        return module

    def exec_module(self, module):
        """The new module ran when it was imported: give it back its own spec (its
        relative imports and ``importlib.reload`` read it)."""
        module.__spec__ = module.__spec__.loader_state


def warn_deprecated(message: str, *, stacklevel: int) -> None:
    r"""A ``FutureWarning`` for the caller ``stacklevel`` frames up (the package's own
    modules use only the current forms, so it fires exactly when a user uses an old one).

    Examples
    --------
    >>> import warnings
    >>> def old_call():
    ...     warn_deprecated("old form", stacklevel=1)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old_call()
    >>> [str(w.message) for w in caught]
    ['old form']
    """
    warnings.warn(message, FutureWarning, stacklevel=stacklevel + 1)
