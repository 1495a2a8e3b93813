"""Plugins: user modules imported before a config is checked, in the parent and in every worker.

A plugin is an ordinary Python module that registers things when imported (``featureode.register_closure``,
:func:`~featureode.calculus.activations.register_activation`, a parametrization, a code-generation backend, an
executor). Two ways to name one:

* ``[plugins] modules = ["mymodule"]`` in a config or grid file (``paths = ["."]``: folders put on ``sys.path``
  first, relative to the file). The list travels inside the config, so every process that checks the config —
  the CLI, a local worker process, a Dask worker on another machine — imports the modules first.
* an installed package's entry point in the group ``featureode.plugins`` (``[project.entry-points."featureode.plugins"]
  name = "mypackage.featureode_plugin"`` in its pyproject.toml): loaded once per process before the first config is
  checked. An entry point naming a function (``"mypackage:register"``) is called with no arguments.

Importing is idempotent: a module already imported in this process is not run again.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import sys
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

from featureode.core.errors import FeatureODEError

#: The entry-point group installed packages use to register their plugins.
ENTRY_POINT_GROUP = "featureode.plugins"

_lock = threading.Lock()
_entry_points_loaded = False


class PluginError(FeatureODEError, ImportError):
    """A plugin module that cannot be found or fails while it is imported."""


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}" if str(exc) else type(exc).__name__


def add_paths(paths: Iterable[str]) -> None:
    """Put each folder of ``paths`` (absolute) at the front of ``sys.path`` unless it is already there."""
    for p in reversed([str(p) for p in paths]):
        if p not in sys.path:
            sys.path.insert(0, p)


def load_modules(modules: Sequence[str], paths: Sequence[str] = (), where: str = "[plugins] modules") -> list[str]:
    """Import each plugin module of ``modules`` (after :func:`add_paths`); returns the names imported now.

    A module that is missing or raises while it is imported ends in :class:`PluginError`, one line naming the module,
    what went wrong and the fix (the original exception is chained, for ``--traceback``)."""
    add_paths(paths)
    done = []
    for name in modules:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.split(".")[0] != exc.name.split(".")[0] and exc.name != name:
                raise PluginError(f"{where}: plugin {name!r} failed while importing: {_one_line(exc)}") from exc
            raise PluginError(f"{where}: cannot import plugin {name!r} ({_one_line(exc)}); install it, or add its "
                              f"folder to [plugins] paths (relative to the file) or to PYTHONPATH") from exc
        except FeatureODEError as exc:
            raise PluginError(f"{where}: plugin {name!r} failed while importing: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 — the user's module: report it as one line naming the module
            raise PluginError(f"{where}: plugin {name!r} failed while importing: {_one_line(exc)}") from exc
        done.append(name)
    return done


def load_entry_points() -> list[str]:
    """Load every entry point of :data:`ENTRY_POINT_GROUP` (once per process); returns their names."""
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return []
        _entry_points_loaded = True
        names = []
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            where = f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP!r}"
            try:
                obj: Any = ep.load()
                if callable(obj) and not isinstance(obj, type(sys)):
                    obj()
            except Exception as exc:  # noqa: BLE001 — an installed package's plugin: one line naming it
                raise PluginError(f"{where} failed: {_one_line(exc)}; fix or uninstall that package") from exc
            names.append(ep.name)
        return names


def resolve_paths(paths: Sequence[str], base_dir: "str | Path | None") -> list[str]:
    """``paths`` made absolute against ``base_dir`` (the folder of the file that lists them; default: the current
    folder), so they mean the same in a worker started elsewhere."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return [str((base / p).resolve()) for p in paths]
