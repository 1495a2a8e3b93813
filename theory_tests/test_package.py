"""The package as a user meets it: the flat public namespace (complete, lazy, the same objects as the sub-packages'),
the version from one source, and what the documentation claims that code can check (its table of the public names,
the SLURM job-array route)."""
from __future__ import annotations

import ast
import importlib
import inspect
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import featureode

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_every_public_name_resolves_to_the_object_its_module_defines():
    assert featureode.__all__ == sorted(set(featureode.__all__)) and len(featureode.__all__) >= 40
    for name in featureode.__all__:
        module = featureode._EXPORTS[name]
        obj = getattr(featureode, name)
        assert obj is getattr(importlib.import_module(module), name), name
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__ == module, f"{name} is defined in {obj.__module__}, listed under {module}"
    listed = dir(featureode)
    assert set(featureode.__all__) <= set(listed) and "__version__" in listed
    with pytest.raises(AttributeError, match="module 'featureode' has no attribute 'no_such_name'"):
        featureode.no_such_name  # noqa: B018


def test_static_imports_match_the_lazy_table():
    """The ``if TYPE_CHECKING:`` block (what type checkers and the docs' static reader see) names exactly the lazy
    table's names, each from the same module."""
    tree = ast.parse((ROOT / "featureode" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    static = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
              for alias in node.names}
    assert static == featureode._EXPORTS


def test_import_is_lazy():
    """``import featureode`` loads no heavy dependency; touching a name loads its module then."""
    code = ("import sys, featureode\n"
            "heavy = ('numpy', 'sympy', 'scipy', 'torch', 'matplotlib', 'numba')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
            "featureode.Mode\n"
            "print('sympy' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True False"  # Mode is SymPy-based; torch only comes with the simulator


def test_docs_list_every_public_name():
    """The Python API page's table of public names is the namespace's table (name → defining module)."""
    text = (DOCS / "guide" / "python-api.md").read_text().split("## The public names", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| \[`([\w.]+)`\]\(\.\./api/\w+\.md\) \|$", text, flags=re.M))
    assert rows == {k: v for k, v in featureode._EXPORTS.items() if k != "__version__"}
    for module in set(rows.values()):  # each link goes to the API page of the module's sub-package
        page = module.split(".")[1]
        assert f"::: {module}" in (DOCS / "api" / f"{page}.md").read_text()


def test_api_reference_has_every_module():
    """Each module of the package has its section on its sub-package's API page (a new module must be added)."""
    pages = {p.stem: p.read_text() for p in (DOCS / "api").glob("*.md")}
    for path in sorted((ROOT / "featureode").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.name in ("__init__", "__main__", "_version"):
            continue
        module = ".".join(rel.parts)
        page = rel.parts[1]  # featureode/config/rules.py → config.md, featureode/kernel/x.py → kernel.md
        assert f"::: {module}\n" in pages.get(page, ""), f"{module} is missing from docs/api/{page}.md"


def test_version_has_one_source():
    from featureode._version import __version__

    assert featureode.__version__ == __version__ and re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    run = subprocess.run([sys.executable, "-m", "featureode", "--version"], capture_output=True, text=True)
    assert (run.returncode, run.stdout.strip()) == (0, f"featureode {__version__}")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]  # no second, static version
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "featureode._version.__version__"}
    assert meta["project"]["license"] == "BSD-3-Clause"
    cff = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^version: (.+)$", cff, flags=re.M).group(1).strip().strip('"') == __version__
    assert f"## [{__version__}]" in (ROOT / "CHANGELOG.md").read_text()
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()


def test_readme_is_a_short_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for link in re.findall(r"\]\(((?:docs|examples)/[^)#]+)", text):
        assert (ROOT / link).exists(), link
    assert "../shared" not in text and "../shared" not in (ROOT / "featureode" / "__init__.py").read_text()


GRID = '''
[set]
"data.dim" = 4
"training.t_max" = 40.0
"ode.variants" = ["lazy", "displacement"]
"ode.basis" = "target"
[grid]
"target.expr" = ["z0", "z1"]
"network.richness" = [0.05, 0.5]
'''


def test_slurm_job_array_route_gives_the_sweep_its_runs(tmp_path):
    """The SLURM page's job-array function, called once per array index (as SLURM would), computes every run; the
    collecting ``featureode sweep`` then reuses all of them, and the table equals a plain sweep's. The lazy ODE's
    t10 is checked against the closed form of the lazy flow on one mode, ``t10 = ln 10 / (2 λ_β(0))``."""
    from featureode.config import config_from_dict
    from featureode.kernel.theory import kernel_theory
    from featureode.workflow.grid import load_grid
    from featureode.workflow.sweeps import read_results, run_sweep

    page = (DOCS / "guide" / "slurm.md").read_text()
    script = next(b.split("```", 1)[0] for b in page.split("```python\n")[1:] if "def run_one" in b)
    namespace: dict = {"__name__": "slurm_sweep"}
    exec(compile(script, "slurm.md", "exec"), namespace)
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(GRID)
    out = tmp_path / "array"
    n = len(namespace["runs_of"](str(grid_file), str(out), True))
    assert n == 4
    statuses = [namespace["run_one"](str(grid_file), str(out), k, True) for k in range(n)]
    assert all(s.endswith(": ok") for s in statuses)

    collected = run_sweep(load_grid(grid_file), out, ode_only=True, progress=False)
    assert (collected.computed, collected.reused) == (0, n)
    run_sweep(load_grid(grid_file), tmp_path / "plain", ode_only=True, progress=False)
    key = lambda r: (r["target.expr"], r["network.richness"], r["variant"])  # noqa: E731
    got = {key(r): r for r in read_results(out / "results.csv")}
    ref = {key(r): r for r in read_results(tmp_path / "plain" / "results.csv")}
    assert got.keys() == ref.keys() and len(got) == 8
    for k, r in got.items():
        assert r["status"] == "ok" and float(r["t10"]) == float(ref[k]["t10"])
        if k[2] == "lazy":
            cfg = config_from_dict({"target": {"expr": k[0]}, "data": {"dim": 4},
                                    "network": {"richness": float(k[1])}})
            lam = float(kernel_theory(cfg, basis="target").lambda_exact[0])
            assert float(r["t10"]) == pytest.approx(math.log(10) / (2 * lam), rel=1e-5)
    # the array's runs left their curves in their folders; the collecting sweep put them in its curve file
    from featureode.workflow.table import read_curves

    order = ["run", "variant", "t"]
    pd_got, pd_ref = read_curves(out).sort_values(order), read_curves(tmp_path / "plain").sort_values(order)
    assert len(pd_got) == 8 * 200
    assert (pd_got[["run", "variant"]].to_numpy() == pd_ref[["run", "variant"]].to_numpy()).all()
    for col in ("t", "loss", "in_support_loss"):
        assert np.array_equal(pd_got[col].to_numpy(), pd_ref[col].to_numpy()), col
