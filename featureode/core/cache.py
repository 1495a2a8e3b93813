"""The on-disk cache of generated code (theory §5): where it lives and how an entry is written.

Generated Python sources — the compiled ODE modules of :mod:`featureode.ode.compile` and the NumPy forms of the closed
derivative means ``m_k(b, s)`` of :mod:`featureode.calculus.activations` — are kept in ``$FEATUREODE_CACHE_DIR`` (default
``~/.cache/featureode``) under a hash of everything that shapes them, so a later process reads them instead of
deriving them again (a cache hit needs no symbolic work). Entries are written atomically: a reader sees a whole
file or none.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    """Where generated sources live: ``$FEATUREODE_CACHE_DIR`` or ``~/.cache/featureode``."""
    path = Path(os.environ.get("FEATUREODE_CACHE_DIR") or Path.home() / ".cache" / "featureode")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_text(name: str, make: Callable[[], str]) -> tuple[Path, bool]:
    """The cache entry ``name`` (a file name under :func:`cache_dir`), written from ``make()`` when absent.

    Returns the path and whether it was already there. ``name`` must carry the hash of every input of ``make``.
    """
    path = cache_dir() / name
    if path.exists():
        return path, True
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(make())
    os.replace(tmp, path)
    return path, False
