"""The on-disk cache of generated code (theory §5): where it lives and how an entry is written.

Generated Python sources — the compiled ODE modules of :mod:`featureode.ode.compile` and the NumPy forms of the closed
derivative means ``m_k(b, s)`` of :mod:`featureode.calculus.activations` — are kept in ``$FEATUREODE_CACHE_DIR`` (default
``~/.cache/featureode``) under a hash of everything that shapes them, so a later process reads them instead of
deriving them again (a cache hit needs no symbolic work). Entries are written atomically: a reader sees a whole
file or none.
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    """Where generated sources live: ``$FEATUREODE_CACHE_DIR`` or ``~/.cache/featureode``."""
    path = Path(os.environ.get("FEATUREODE_CACHE_DIR") or Path.home() / ".cache" / "featureode")
    path.mkdir(parents=True, exist_ok=True)
    return path


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read without changing it where the system tells it (Linux ≥ 4.7: the ``Umask:`` line of
    ``/proc/self/status``); elsewhere set and restored under a lock. ``os.umask`` is process-wide: two threads that
    swapped it at once without the lock could leave it changed for good, and a file another thread creates while it
    is swapped gets the temporary mask (``0o077`` here, so such a file is private, never more open)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def atomic_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """The one atomic writer: a temp file in the same folder (mode ``0o666 & ~umask``, as ``open`` would make it;
    ``mkstemp`` alone gives 0600), fsynced, then renamed over ``path``. ``durable=False`` skips the fsync (≈ 1 ms on
    a local disk, more on a network one) for files whose loss after a crash costs nothing but a recomputation: the
    rename still makes the file appear whole or not at all to every reader, and after a power loss the file is the
    old one, the new one or empty (which its readers refuse as unreadable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno:   # name the file it was writing
            raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path)) from exc
        raise


def cached_text(name: str, make: Callable[[], str]) -> tuple[Path, bool]:
    """The cache entry ``name`` (a file name under :func:`cache_dir`), written from ``make()`` when absent.

    Returns the path and whether it was already there. ``name`` must carry the hash of every input of ``make``.
    """
    path = cache_dir() / name
    if path.exists():
        return path, True
    atomic_bytes(path, make().encode(), durable=False)
    return path, False
