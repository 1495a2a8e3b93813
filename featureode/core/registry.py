"""One registry pattern for every extension point: activations, closures, parametrizations, code-generation
backends and sweep executors are each a :class:`Registry` of named objects.

Name rules (the same for every registry):

* A name is a non-empty string without surrounding whitespace, stored exactly as registered; names are
  case-sensitive (``"Cubic"`` and ``"cubic"`` are different names).
* A lookup (:meth:`Registry.get`, ``in``, ``[name]``) tries the exact name first; failing that, it strips surrounding
  whitespace and compares case-folded names, and accepts the match when exactly one registered name folds to it
  (``" ReLU "`` finds ``"relu"``). :meth:`Registry.canonical` gives the registered spelling a lookup resolved to.
* An unknown name raises the registry's error class (a :class:`~featureode.core.errors.FeatureODEError`) with one
  line naming the value, the closest registered name (:mod:`difflib`) and all valid names.
* Registering a name that is taken (or that folds to a taken name) is an error unless the object is the same one
  or ``replace=True``.

Registries are plain module-level objects, so a registration made in a process is seen only there: worker processes
import the user's plugin modules themselves (:mod:`featureode.core.plugins`).
"""
from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

from featureode.core.errors import FeatureODEError

T = TypeVar("T")


class RegistryError(FeatureODEError, LookupError):
    """An unknown name, or a name registered twice (the default error class of a :class:`Registry`)."""


def closest(name: str, options: list[str]) -> str | None:
    """The registered name closest to ``name`` (case-insensitive :func:`difflib.get_close_matches`), or ``None``."""
    folded = {o.casefold(): o for o in options}
    close = difflib.get_close_matches(name.strip().casefold(), list(folded), n=1, cutoff=0.5)
    return folded[close[0]] if close else None


class Registry(Generic[T]):
    """Named objects of one kind (``kind``: a word for messages, e.g. ``"closure"``).

    ``error``: the :class:`FeatureODEError` subclass raised for an unknown or duplicate name (each kind keeps its own
    error class, so ``except VariantError`` callers still catch an unknown closure). ``hint``: appended to the
    unknown-name message (e.g. "or an expression in u"). ``check``: called on each object before it is registered
    (raise to refuse it).
    """

    def __init__(self, kind: str, error: type[FeatureODEError] = RegistryError, hint: str = "",
                 check: Callable[[str, T], None] | None = None) -> None:
        if not issubclass(error, FeatureODEError):
            raise TypeError(f"a registry's error class must derive from FeatureODEError, got {error!r}")
        self.kind, self.error, self.hint, self._check = kind, error, hint, check
        self._items: dict[str, T] = {}

    # -- lookup ---------------------------------------------------------------------------------------------------
    def _find(self, name: object) -> str | None:
        if not isinstance(name, str):
            return None
        if name in self._items:
            return name
        folded = name.strip().casefold()
        hits = [n for n in self._items if n.casefold() == folded]
        return hits[0] if len(hits) == 1 else None

    def canonical(self, name: str) -> str:
        """The registered spelling of ``name`` (see the lookup rule); an unknown name raises the error class."""
        found = self._find(name)
        if found is None:
            raise self.error(self.unknown_message(name))
        return found

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name raises the error class (closest name, valid names)."""
        return self._items[self.canonical(name)]

    def unknown_message(self, name: object) -> str:
        """One line: the unknown value, the closest registered name, the valid names and the hint."""
        names = self.names()
        near = closest(name, names) if isinstance(name, str) else None
        text = f"unknown {self.kind} {name!r}" + (f" (did you mean {near!r}?)" if near else "")
        text += f"; valid {self.kind}s: {', '.join(names) or '(none registered)'}"
        return text + (f" {self.hint}" if self.hint else "")

    def names(self) -> list[str]:
        """The registered names, in registration order (built-in ones first)."""
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return self._find(name) is not None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[str]:
        """The registered names (so ``dict(registry)`` copies it)."""
        return self.names()

    def values(self) -> list[T]:
        """The registered objects, in registration order."""
        return list(self._items.values())

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs, in registration order."""
        return list(self._items.items())

    # -- registration ---------------------------------------------------------------------------------------------
    def register(self, name: str, item: T, replace: bool = False) -> T:
        """Add ``item`` as ``name`` and return it. A taken name (also one equal up to case) is refused unless
        ``item`` is the object already there or ``replace`` is true."""
        if not isinstance(name, str) or not name or name != name.strip():
            raise self.error(f"a {self.kind} name must be a non-empty string without surrounding spaces, "
                             f"got {name!r}")
        taken = self._items.get(name)
        clash = [n for n in self._items if n.casefold() == name.casefold() and n != name]
        if not replace:
            if taken is not None and taken is not item:
                raise self.error(f"{self.kind} {name!r} is already registered; pass replace=True to replace it")
            if clash:
                raise self.error(f"{self.kind} {name!r} differs only in case from the registered {clash[0]!r}; "
                                 f"choose another name")
        if self._check is not None:
            self._check(name, item)
        for n in clash:
            del self._items[n]
        self._items[name] = item
        return item

    def __setitem__(self, name: str, item: T) -> None:
        """``registry[name] = item``: :meth:`register` with ``replace=True`` (the old dict spelling)."""
        self.register(name, item, replace=True)

    def unregister(self, name: str) -> T:
        """Remove ``name`` (exact or by the lookup rule) and return its object."""
        return self._items.pop(self.canonical(name))

    def copy(self) -> "Registry[T]":
        """An independent registry with the same kind, rules and entries (e.g. to undo registrations in a test)."""
        out: Registry[T] = Registry(self.kind, self.error, self.hint, self._check)
        out._items = dict(self._items)
        return out

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"
