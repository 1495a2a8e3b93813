"""The scripts outside the package (benchmarks, validation, examples, derivations) name only featureode objects that
exist: every ``from featureode… import X`` resolves, and every ``alias.attr`` read off a featureode module they
import resolves too. They are not run by the test suite (most train networks or take minutes), so a rename inside
the package would otherwise break them silently (``benchmarks/bench_theory.py`` read ``featureode.kernel.kernel_theory``
for a while after the package became layered)."""
from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "docs/validation", "examples", "derivations")
                 for p in (ROOT / folder).glob("*.py"))


def _member(mod: types.ModuleType, name: str) -> object | None:
    """``mod.name``, or the sub-module ``mod.name`` its package has not imported yet; None if neither exists."""
    if hasattr(mod, name):
        return getattr(mod, name)
    try:
        return importlib.import_module(f"{mod.__name__}.{name}")
    except ImportError:
        return None


def _unresolved(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, types.ModuleType] = {}   # local name -> featureode module
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "featureode":
            mod = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name == "*":
                    continue
                obj = _member(mod, alias.name)
                if obj is None:
                    bad.append(f"line {node.lineno}: {node.module} has no {alias.name}")
                elif isinstance(obj, types.ModuleType):
                    modules[alias.asname or alias.name] = obj
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "featureode" and alias.asname:
                    modules[alias.asname] = importlib.import_module(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and isinstance(node.ctx, ast.Load):
            mod = modules[node.value.id]
            if _member(mod, node.attr) is None:
                bad.append(f"line {node.lineno}: {node.value.id}.{node.attr} ({mod.__name__} has no {node.attr})")
    return bad


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_script_names_only_existing_featureode_objects(path):
    assert _unresolved(path) == []


def test_the_check_catches_a_missing_module_attribute(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from featureode import kernel\nfrom featureode.kernel import theory as k\n"
                   "kernel.kernel_theory(1)\nk.kernel_theory(1)\nk.no_such_thing\n")
    assert sorted(b.split(":")[0] for b in _unresolved(bad)) == ["line 3", "line 5"]
