"""Grid files (theory §7): parsing, point order and names, every bad input, the shipped suites, ``t_max = "auto"``."""
from __future__ import annotations

import itertools
import math

import pytest

from featureode.config import config_from_dict, load_config
from featureode.workflow.grid import GridError, check_points, load_grid, suite_names, suite_path
from featureode.workflow.sweeps import MAX_RUNS_WITHOUT_YES, auto_t_max, lazy_t10, plan


def _grid(text: str, tmp_path, name: str = "g.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_grid(path)


def test_set_grid_zip_and_seeds(tmp_path):
    g = _grid('''
[set]
"network.width" = 64
"target.expr" = "z0"
[grid]
"network.richness" = [0.01, 0.1, 0.5]
"data.dim" = [4, 8]
[zip]
"data.exponent" = [1.5, 1.0]
"data.offset" = [3.0, 1.0]
[sweep]
seeds = [0, 2]
''', tmp_path)
    pts = g.points()
    assert g.size == len(pts) == 2 * 3 * 2 and g.n_runs == 24 and g.seeds == (0, 2)
    assert g.keys == ("data.exponent", "data.offset", "network.richness", "data.dim")
    # zip tuples outermost, then the grid keys in file order, the last fastest (as itertools.product)
    want = [(e, o, r, d) for (e, o), r, d in itertools.product([(1.5, 3.0), (1.0, 1.0)], [0.01, 0.1, 0.5], [4, 8])]
    assert [tuple(p.values.values()) for p in pts] == want
    assert len({p.name for p in pts}) == len(pts)
    raw = g.raw_config(pts[3], 2)
    cfg = config_from_dict(raw)
    assert (cfg.network.width, cfg.target.expr, cfg.training.seed) == (64, "z0", 2)
    assert (cfg.data.exponent, cfg.data.offset, cfg.network.richness, cfg.data.dim) == want[3]
    # keys not set come from the built-in default config
    default = load_config()
    assert cfg.network.bias_std == default.network.bias_std and cfg.ode.variants == default.ode.variants
    assert pts[3].run_name(0) == pts[3].name and pts[3].run_name(2) == pts[3].name + "_s2"


def test_base_is_relative_to_the_grid_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.toml").write_text('[target]\nexpr = "h2(z0)"\n[network]\nwidth = 48\n')
    g = _grid('base = "base.toml"\n[grid]\n"network.richness" = [0.2]\n', tmp_path / "sub")
    cfg = config_from_dict(g.raw_config(g.points()[0], 0))
    assert (cfg.target.expr, cfg.network.width, cfg.network.richness) == ("h2(z0)", 48, 0.2)
    assert g.points()[0].name == "richness0.2"
    with pytest.raises(GridError, match="base config .*missing.toml' does not exist"):
        _grid('base = "missing.toml"\n', tmp_path)


def test_name_template_and_its_errors(tmp_path):
    g = _grid('[set]\n"data.dim" = 8\n[grid]\n"target.expr" = ["z0*z1", "staircase(2)"]\n'
              '"network.richness" = [0.005, 0.5]\n[sweep]\nname = "{target.expr}_d{data.dim}_g{network.richness}"\n',
              tmp_path)
    assert [p.name for p in g.points()] == ["z0_z1_d8_g0.005", "z0_z1_d8_g0.5", "staircase_2_d8_g0.005",
                                            "staircase_2_d8_g0.5"]
    with pytest.raises(GridError, match=r"\{network.richnes\}, which is not a config key; did you mean "
                                        r"'network.richness'"):
        _grid('[grid]\n"network.richness" = [0.1]\n[sweep]\nname = "g{network.richnes}"\n', tmp_path)
    with pytest.raises(GridError, match=r"gives the same run folder 'x' to point 0 \(network.richness = 0.1\) and point 1"):
        _grid('[grid]\n"network.richness" = [0.1, 0.2]\n[sweep]\nname = "x"\n', tmp_path).points()


@pytest.mark.parametrize("text, message", [
    ('[grid]\n"network.widht" = [1, 2]\n', r"unknown key 'network.widht' in \[grid\]; did you mean 'network.width'"),
    ('[set]\n"netwrk.width" = 3\n', r"unknown key 'netwrk.width' in \[set\]; did you mean 'network.width'"),
    ('[grid]\nwidth = [1, 2]\n', r"\[grid\] key 'width' must be written \"table.key\""),
    ('[grid]\n"network.width" = []\n', r"\[grid\] 'network.width' is an empty axis"),
    ('[grid]\n"network.width" = 64\n', r"\[grid\] 'network.width' must be a list of values"),
    ('[zip]\n"data.dim" = [4, 8]\n"target.expr" = ["z0"]\n',
     r"\[zip\] axes have unequal lengths \(data.dim: 2, target.expr: 1\)"),
    ('[grid]\n"data.dim" = [4]\n[zip]\n"data.dim" = [8]\n', r"'data.dim' is both in \[grid\] and \[zip\]"),
    ('[set]\n"data.dim" = 4\n[grid]\n"data.dim" = [8]\n', r"'data.dim' is both in \[set\] and an axis"),
    ('[grid]\n"training.seed" = [0, 1]\n', r"list the seeds in \[sweep\] seeds"),
    ('[sweep]\nseeds = []\n', r"seeds must be a non-empty list"),
    ('[sweep]\nseeds = [0, 0]\n', r"lists a seed twice"),
    ('[sweep]\nseed = [0]\n', r"unknown key 'seed' in \[sweep\]; did you mean 'seeds'"),
    ('[sweep]\n"data.dim" = [4, 8]\n', r"'data.dim' in \[sweep\].*go in \[grid\] \(every combination\) or \[zip\]"),
    ('[grd]\n"data.dim" = [4]\n', r"unknown grid entry 'grd'; did you mean 'grid'"),
    ('[sweep]\nt_max_factor = -1\n', r"t_max_factor must be a positive number"),
])
def test_bad_grids_name_the_problem(tmp_path, text, message):
    with pytest.raises(GridError, match=message):
        _grid(text, tmp_path)


def test_wrong_value_type_is_named_with_its_point(tmp_path):
    g = _grid('[set]\n"target.expr" = "z0"\n[grid]\n"network.richness" = [0.1, 0.2]\n'
              '"network.width" = [64, "wide"]\n', tmp_path)
    with pytest.raises(GridError, match=r"point 1 \(network.richness = 0.1, network.width = 'wide'\): "
                                        r"\[network\] width must be an integer.*got 'wide'"):
        check_points(g)
    with pytest.raises(GridError, match=r"point 0 \(network.richness = -1.0\): \[network\] richness.* must be > 0"):
        check_points(_grid('[set]\n"target.expr" = "z0"\n[grid]\n"network.richness" = [-1.0]\n', tmp_path))


def test_too_many_runs_need_yes(tmp_path):
    g = _grid('[set]\n"target.expr" = "z0"\n[grid]\n"network.width" = [' + ", ".join(map(str, range(1, 102)))
              + ']\n"network.bias_std" = [' + ", ".join(f"{0.01 * i:.2f}" for i in range(100)) + "]\n", tmp_path)
    assert g.n_runs == 10_100 > MAX_RUNS_WITHOUT_YES
    with pytest.raises(GridError, match=r"has 10100 runs \(10100 points × 1 seeds\), more than 10000; pass --yes"):
        plan(g, tmp_path / "out")


def test_shipped_suites_parse():
    assert {"standard", "quick"} <= set(suite_names())
    for name in suite_names():
        g = load_grid(suite_path(name))
        check_points(g)
        assert g.description
    with pytest.raises(GridError, match="unknown suite 'standrd'; did you mean 'standard'"):
        suite_path("standrd")


#: A few cases of the standard suite written out by hand (issue 6's grid): every key the suite sets, the case's
#: target, dimension, richness and seed. ``t_max`` is checked separately.
HAND_WRITTEN = [("z0_d16_g0.005", "z0", 16, 0.005, 0), ("h2_z0_d16_g0.15_s1", "h2(z0)", 16, 0.15, 1),
                ("staircase_3_d16_g0.5_s2", "staircase(3)", 16, 0.5, 2), ("z0_z1_d8_g0.15", "z0*z1", 8, 0.15, 0),
                ("z0_z1_d32_g0.5_s1", "z0*z1", 32, 0.5, 1)]


def test_standard_suite_matches_a_hand_written_list(tmp_path):
    runs = {t.name: t for _, t in plan(load_grid(suite_path("standard")), tmp_path)}
    assert len(runs) == 63
    for name, expr, dim, gamma, seed in HAND_WRITTEN:
        want = config_from_dict({
            "data": {"dim": dim, "exponent": 1.5, "offset": 3.0}, "target": {"expr": expr},
            "network": {"activation": "relu", "width": 1024, "richness": gamma, "bias_std": 0.5},
            "training": {"batch": 2048, "seed": seed, "stop_loss": 0.005, "threads": 1, "t_max": 1.0},
            "ode": {"variants": ["lazy", "agop", "displacement"], "basis": "target"}})
        raw = runs[name].raw
        assert raw["training"]["t_max"] == "auto"
        got = config_from_dict({**raw, "training": {**raw["training"], "t_max": 1.0}})
        assert got.to_dict() == want.to_dict(), name


def test_auto_t_max_is_the_lazy_bound_for_one_mode():
    """Single mode z0: the lazy flow's loss is e^{−2λt}, so t10 = ln 10 / (2λ) (closed form, not the bisection)."""
    from featureode.kernel.theory import kernel_theory

    cfg = config_from_dict({"target": {"expr": "z0"}, "data": {"dim": 4}})
    theory = kernel_theory(cfg, basis="target")
    lam = float(theory.lambda_exact[0])
    assert lazy_t10(theory) == pytest.approx(math.log(10) / (2 * lam), rel=1e-12)
    # the cap wins when it is the smallest; a horizon shorter than the displacement t10 leaves the lazy bound alone
    assert auto_t_max(cfg, factor=2.0, cap=1.234567) == 1.235
    t = auto_t_max(cfg, factor=0.5)
    assert t == float(f"{0.5 * math.log(10) / (2 * lam):.4g}")


def test_example_grids_parse():
    from pathlib import Path

    paths = sorted((Path(__file__).resolve().parents[1] / "examples" / "grids").glob("*.toml"))
    assert paths
    for path in paths:
        check_points(load_grid(path))
