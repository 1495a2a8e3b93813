"""Extensions that travel: a plugin module named in ``[plugins]`` is imported before the config is checked, in the
parent and in every worker (forkserver processes, Dask workers), and an installed package's ``featureode.plugins``
entry point likewise. A closure registered by the plugin and the same law written as ``[ode.custom.NAME]`` give
identical curves in ``solve``, ``compare`` and ``sweep``."""
from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from featureode.cli import main
from featureode.config import ConfigError, load_config
from featureode.core import plugins as fplugins
from featureode.ode import variants

#: displacement at half strength: r_i = 1 + ½ q Σ_β β_i c_|β| g^β D_β²
LAW = "1 + q/2*sum_b(B[b,i]*c[b]*gpow[b]*D[b]**2)"
PLUGIN = "fode_test_plugin_half"

PLUGIN_SOURCE = f'''"""A user plugin: registers the half-strength displacement closure when imported."""
import featureode

featureode.register_closure("half_plugin", {LAW!r}, doc="displacement at half strength (a plugin)")
'''

CONFIG = f'''
[plugins]
modules = ["{PLUGIN}"]
paths = ["plugin_dir"]
[target]
expr = "z0"
[data]
dim = 4
[network]
width = 32
richness = 0.5
[training]
batch = 64
n_test = 500
n_points = 8
t_max = 6.0
threads = 1
compile = false
device = "cpu"
[ode]
variants = ["lazy", "half_plugin", "half_custom"]
basis = "target"
[ode.custom.half_custom]
closure = "{LAW}"
'''

GRID = f'''
base = "base.toml"
[plugins]
modules = ["{PLUGIN}"]
paths = ["plugin_dir"]
[set]
"training.t_max" = 40.0
[grid]
"target.expr" = ["z0", "z1"]
'''

# the grid's base config names the plugin closure without a [plugins] table: the grid's is imported before it is read
BASE = "[target]" + CONFIG.split("[target]", 1)[1]


@pytest.fixture
def plugin_files(tmp_path, monkeypatch):
    """The plugin in tmp/plugin_dir (found through [plugins] paths only), and the config and grid beside it; the
    registries and sys.modules are restored afterwards."""
    (tmp_path / "plugin_dir").mkdir()
    (tmp_path / "plugin_dir" / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    (tmp_path / "config.toml").write_text(CONFIG)
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    monkeypatch.setattr(variants, "CLOSURES", variants.CLOSURES.copy())
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop(PLUGIN, None)


def _ode_loss(path: Path, name: str) -> np.ndarray:
    return np.asarray(json.loads(path.read_text())["variants"][name]["loss"], dtype=float)


def test_solve_imports_the_plugin_and_matches_the_custom_law(plugin_files, capsys):
    tmp = plugin_files
    assert PLUGIN not in sys.modules
    assert main(["solve", str(tmp / "config.toml"), "--out", str(tmp / "solve")]) == 0
    assert PLUGIN in sys.modules and str(tmp / "plugin_dir") in sys.path
    plugin, custom, lazy = (_ode_loss(tmp / "solve" / "ode.json", n) for n in ("half_plugin", "half_custom", "lazy"))
    np.testing.assert_array_equal(plugin, custom)
    assert np.max(np.abs(plugin - lazy)) > 1e-3  # the law does something (γ = 0.5: feature growth is visible)


def test_compare_with_the_plugin(plugin_files, capsys):
    tmp = plugin_files
    assert main(["compare", str(tmp / "config.toml"), "--out", str(tmp / "cmp"), "--quiet"]) == 0
    rep = json.loads((tmp / "cmp" / "report.json").read_text())["variants"]
    assert rep["half_plugin"]["t50"] == rep["half_custom"]["t50"]
    assert rep["half_plugin"]["t50_ratio"] == rep["half_custom"]["t50_ratio"]
    np.testing.assert_array_equal(_ode_loss(tmp / "cmp" / "ode.json", "half_plugin"),
                                  _ode_loss(tmp / "cmp" / "ode.json", "half_custom"))


def _sweep_and_check(tmp: Path, out: str, *extra: str) -> None:
    pd = pytest.importorskip("pandas")
    assert main(["sweep", str(tmp / "grid.toml"), "--out", str(tmp / out), "--ode-only", "--quiet", *extra]) == 0
    df = pd.read_csv(tmp / out / "results.csv")
    assert set(df["status"]) == {"ok"} and len(df) == 2 * 3
    for expr in ("z0", "z1"):
        rows = df[df["target.expr"] == expr].set_index("variant")
        assert rows.loc["half_plugin", "t10"] == rows.loc["half_custom", "t10"]
        assert rows.loc["half_plugin", "t50"] == rows.loc["half_custom", "t50"]
        assert rows.loc["half_plugin", "t10"] < rows.loc["lazy", "t10"]   # feature growth speeds learning
    from featureode.workflow.table import read_curves

    curves = read_curves(tmp / out)   # an ODE-only sweep keeps its curves in one columnar file
    for run in ("runs/expr-z0", "runs/expr-z1"):
        one = curves[curves.run == run]
        np.testing.assert_array_equal(one[one.variant == "half_plugin"].sort_values("t").loss.to_numpy(),
                                      one[one.variant == "half_custom"].sort_values("t").loss.to_numpy())


def test_sweep_two_local_workers_import_the_plugin(plugin_files):
    """``--jobs 2``: forkserver worker processes, started fresh, import the plugin from each task's config. The
    control: with the plugin imported here but not named in the grid, the workers do not know the closure."""
    from featureode.workflow.grid import load_grid
    from featureode.workflow.sweeps import make_executor, run_sweep

    tmp = plugin_files
    _sweep_and_check(tmp, "local", "--jobs", "2")
    assert "half_plugin" in variants.CLOSURES    # registered in this process by the sweep's grid
    (tmp / "bare.toml").write_text(GRID.replace(f'[plugins]\nmodules = ["{PLUGIN}"]\npaths = ["plugin_dir"]\n', ""))
    ex = make_executor("local", 2)
    try:
        res = run_sweep(load_grid(tmp / "bare.toml"), tmp / "bare", ex, ode_only=True, progress=False)
    finally:
        ex.close()
    assert len(res.failed) == 2 and all("unknown variant 'half_plugin'" in o.status for o in res.failed)


@pytest.mark.slow
def test_sweep_on_dask_workers_imports_the_plugin(plugin_files):
    """``--executor dask``: a real LocalCluster of two worker processes."""
    pytest.importorskip("distributed")
    _sweep_and_check(plugin_files, "dask", "--executor", "dask", "--jobs", "2")


def test_missing_or_failing_plugin_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[plugins]\nmodules = ["fode_no_such_plugin"]\n[target]\nexpr = "z0"\n')
    assert main(["kernel", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot import plugin 'fode_no_such_plugin'" in err and "PYTHONPATH" in err
    (tmp_path / "fode_broken_plugin.py").write_text("raise RuntimeError('half-written plugin')\n")
    cfg.write_text('[plugins]\nmodules = ["fode_broken_plugin"]\npaths = ["."]\n[target]\nexpr = "z0"\n')
    try:
        with pytest.raises(ConfigError, match="plugin 'fode_broken_plugin' failed while importing: RuntimeError: "
                                              "half-written plugin"):
            load_config(cfg)
    finally:
        sys.modules.pop("fode_broken_plugin", None)
    cfg.write_text('[plugins]\nmodule = ["x"]\n[target]\nexpr = "z0"\n')
    with pytest.raises(ConfigError, match="unknown key 'module' in \\[plugins\\]; did you mean 'modules'"):
        load_config(cfg)


def test_entry_point_plugins_are_loaded_once(monkeypatch, tmp_path):
    """An installed package's ``featureode.plugins`` entry point (here a fake distribution's) is loaded before the
    first config check of the process; a function entry point is called."""
    calls = []

    class FakeEP:
        name, value = "fake", "fake_pkg:register"

        def load(self):
            return lambda: calls.append("registered")

    def entry_points(group):
        assert group == fplugins.ENTRY_POINT_GROUP
        return [FakeEP()]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(fplugins, "_entry_points_loaded", False)
    load_config(None)
    load_config(None)
    assert calls == ["registered"]

    class BrokenEP(FakeEP):
        def load(self):
            raise ImportError("no module named fake_pkg")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [BrokenEP()])
    monkeypatch.setattr(fplugins, "_entry_points_loaded", False)
    with pytest.raises(ConfigError, match="entry point 'fake' .* failed: ImportError: no module named fake_pkg"):
        load_config(None)
