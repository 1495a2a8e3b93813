"""The one error base: every exception class the package defines is a FeatureODEError (or is listed here, with the
reason, as internal), so the CLI's single ``except FeatureODEError`` reaches every user-facing error."""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import featureode
from featureode.core.errors import FeatureODEError

#: exception classes that are not user-facing errors, each with the reason
INTERNAL = {
    "featureode.ode.runners._Diverged": "raised and caught inside solve's step loop; it becomes a Status, never "
                                        "escapes",
    "featureode.sim.spec.SimulationInterrupted": "an interrupt (a KeyboardInterrupt), not an error: the CLI ends "
                                                 "it with status 130 and its message, as any Ctrl-C",
    "featureode.calculus.numeric_targets.Unsupported": "the numeric target path's hand-over to SymPy; caught by "
                                                       "parse_target, never escapes",
    "featureode.calculus.numeric_targets._NeedFloat": "raised and caught inside numeric_targets.decompose (switch to "
                                                      "floating-point coefficients)",
}


def package_modules() -> list[str]:
    """Every module of the package, found on disk (not only the imported ones); ``__main__`` runs the CLI when
    imported and defines nothing."""
    return sorted(m.name for m in pkgutil.walk_packages(featureode.__path__, prefix="featureode.")
                  if m.name != "featureode.__main__")


@functools.cache
def package_exceptions() -> dict[str, type[BaseException]]:
    """``module.Class`` → class, for every exception class defined (not merely imported) at a module's top level.
    Warnings are not errors and are left out."""
    found: dict[str, type[BaseException]] = {}
    for name in package_modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and not issubclass(obj, Warning)
                    and obj.__module__ == name):
                found[f"{name}.{attr}"] = obj
    return found


def test_every_package_exception_derives_from_the_base():
    found = package_exceptions()
    # the walk sees the errors it must (a broken walk that finds nothing would pass the loop below)
    for known in ("featureode.config.rules.ConfigError", "featureode.workflow.grid.GridError",
                  "featureode.ode.solve.SolveError", "featureode.workflow.runs.FolderInUseError"):
        assert known in found, known
    stray = {key: cls.__mro__ for key, cls in found.items()
             if not issubclass(cls, FeatureODEError) and key not in INTERNAL}
    assert not stray, f"exception classes that do not derive from FeatureODEError: {stray}"
    assert set(INTERNAL) <= set(found), "an INTERNAL entry names a class that no longer exists"


def test_no_exception_class_hides_inside_a_function():
    """An exception class defined inside a function would escape the walk above: the source has none."""
    root = Path(featureode.__file__).parent
    top_level = {key.rsplit(".", 1)[1] for key in package_exceptions()}
    nested = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node not in tree.body and node.name.endswith(("Error", "Exception")):
                nested.append(f"{path.relative_to(root)}:{node.name}")
    assert not nested, nested
    assert top_level


@pytest.mark.parametrize("name", ["ConfigError", "GridError", "VariantError", "TrajectoryFileError"])
def test_second_bases_are_kept(name):
    """``except ValueError`` callers still catch the package's value errors."""
    cls = {key.rsplit(".", 1)[1]: c for key, c in package_exceptions().items()}[name]
    assert issubclass(cls, ValueError) and issubclass(cls, FeatureODEError)
