"""The examples run as written (at reduced size where they train a network), and the main job works end to end."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from featureode.cli import main
from featureode.config import load_config
from test_latex import NO_LATEX, latex_ready
from _configs import DEFAULT_VARIANTS, edited_default

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TOMLS = sorted(EXAMPLES.glob("*.toml"))


def _first_crossing(t: np.ndarray, y: np.ndarray, level: float) -> float | None:
    """theory §5: first time y ≤ level, log y interpolated linearly in t between the bracketing samples."""
    for k in range(len(y)):
        if y[k] <= level:
            if k == 0:
                return float(t[0])
            a, b = math.log(y[k - 1]), math.log(y[k])
            return float(t[k - 1] + (math.log(level) - a) / (b - a) * (t[k] - t[k - 1]))
    return None


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: A validation suite of one tiny case (width 64, batch 128, eager), lazy and displacement ODEs, as a grid file.
TINY_SUITE = '''
[set]
"data.exponent" = 1.5
"data.offset" = 3.0
"data.dim" = 8
"target.expr" = "z0*z1"
"network.width" = 64
"network.bias_std" = 0.5
"training.batch" = 128
"training.n_test" = 1000
"training.n_points" = 8
"training.ntk_probe" = 32
"training.compile" = false
"training.threads" = 1
"training.t_max" = "auto"
"ode.variants" = ["lazy", "displacement"]
[grid]
"network.richness" = [0.5]
[sweep]
name = "{target.expr}_d{data.dim}_g{network.richness}"
t_max_factor = 1.0
t_max_cap = 30.0
'''


@pytest.mark.parametrize("path", TOMLS, ids=[p.stem for p in TOMLS])
def test_example_config_solves(path, tmp_path):
    """Every example config loads and every variant it lists integrates to t_max with finite values."""
    assert main(["solve", str(path), "--out", str(tmp_path)]) == 0
    ode = json.loads((tmp_path / "ode.json").read_text())
    cfg = load_config(path)
    assert len(ode["variants"]) >= len(cfg.ode.variants)
    for name, v in ode["variants"].items():
        assert "error" not in v, name
        assert v["t"][-1] == pytest.approx(cfg.training.t_max)
        assert np.all(np.isfinite(v["loss"])) and v["loss"][0] == pytest.approx(1.0)


def test_ablation_example_is_consistent(tmp_path):
    """In examples/ablation.toml, removing eigen_growth must give back the lazy curve exactly (same equations)."""
    assert main(["solve", str(EXAMPLES / "ablation.toml"), "--out", str(tmp_path)]) == 0
    v = json.loads((tmp_path / "ode.json").read_text())["variants"]
    np.testing.assert_allclose(v["no_growth"]["loss"], v["lazy"]["loss"], rtol=1e-6, atol=1e-12)
    assert v["displacement"]["t10"] < v["lazy"]["t10"]


@pytest.mark.skipif(not latex_ready(), reason=NO_LATEX)
def test_latex_export_of_ablation_compiles(tmp_path):
    tex = tmp_path / "ablation.tex"
    assert main(["derive", str(EXAMPLES / "ablation.toml"), "--latex", str(tex)]) == 0
    body = tex.read_text()
    for name in ("no_growth", "agop_fixed_kappa", "squared_growth"):
        assert name.replace("_", r"\_") in body
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]


def test_stages_example(tmp_path):
    times = _load_script("stages").main(tmp_path)
    assert (tmp_path / "stages.tex").exists()
    assert times["displacement"] < times["displacement-no-eigen_growth"]


def test_custom_closure_example(tmp_path):
    out = _load_script("custom_closure").main(None, out_dir=tmp_path)
    assert set(out) == {"displacement", "exp_displacement"}
    assert (tmp_path / "custom_closure.tex").exists()
    # exp(x) ≥ 1 + x: the compounding closure grows features at least as fast, so it learns no later
    assert out["exp_displacement"]["t50"] <= out["displacement"]["t50"] * (1 + 1e-6)


def test_compare_end_to_end_reduced(tmp_path, capsys):
    """The main job's path at reduced size: report.json schema, report.md, report.png, and the MLP cache reuse."""
    cfg_path = tmp_path / "small.toml"
    cfg_path.write_text(edited_default(("width = 1024", "width = 128"), ("batch = 2048", "batch = 256"),
                                       ("t_max = 300.0", "t_max = 20.0"),
                                       ("seed = 0", "seed = 0\nn_test = 2000\nn_points = 12\nntk_probe = 64")))
    small = load_config(cfg_path)
    assert small.network.width == 128 and small.training.n_test == 2000
    out = tmp_path / "out"
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["mlp"]) >= {"t", "loss", "t50", "t10"}
    assert set(rep["variants"]) == set(small.ode.variants)
    for v in rep["variants"].values():
        assert set(v) >= {"t", "loss", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms"}
    assert (out / "report.png").stat().st_size > 10_000 and "| displacement |" in (out / "report.md").read_text()
    # the metrics of theory §5 recomputed by hand from the curves in the report (the MLP curve is the test loss)
    mlp = json.loads((out / "mlp.json").read_text())
    t_m, l_m = np.asarray(rep["mlp"]["t"]), np.asarray(rep["mlp"]["loss"])
    np.testing.assert_allclose(l_m, np.asarray(mlp["loss"]) / mlp["loss"][0], rtol=1e-12)
    mlp_t50 = _first_crossing(t_m, l_m, 0.5)
    assert rep["mlp"]["t50"] is None if mlp_t50 is None else rep["mlp"]["t50"] == pytest.approx(mlp_t50, rel=1e-12)
    for v in rep["variants"].values():
        t_o, l_o = np.asarray(v["t"]), np.asarray(v["loss"])
        assert l_o[0] == 1.0
        for key, level in (("t50", 0.5), ("t10", 0.1)):
            ode_t, mlp_t = _first_crossing(t_o, l_o, level), _first_crossing(t_m, l_m, level)
            assert v[key] is None if ode_t is None else v[key] == pytest.approx(ode_t, rel=1e-12)
            assert v[f"{key}_ratio"] == (None if ode_t is None or mlp_t is None else pytest.approx(ode_t / mlp_t))
        mask = (l_m > 1e-2) & (t_m > 0) & (t_m <= t_o[-1])
        diff = np.interp(t_m[mask], t_o, np.log(l_o)) - np.log(l_m[mask])
        assert v["log_rms"] == pytest.approx(math.sqrt(np.mean(diff**2)), rel=1e-9)
    stamp = (out / "mlp.json").stat().st_mtime_ns
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet", "--figure-variant", "lazy"]) == 0
    assert (out / "mlp.json").stat().st_mtime_ns == stamp  # the finished simulation was reused
    # a damaged mlp.npz beside a good mlp.json is refused in one line, never reused; --force recomputes it
    (out / "mlp.npz").write_bytes((out / "mlp.npz").read_bytes()[:64])
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error:") and "mlp.npz is damaged" in err and err.count("\n") == 1
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet", "--force"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["mlp"]["loss"] == rep["mlp"]["loss"]  # the same seeds give the same run
    assert main(["compare", str(cfg_path), "--out", str(out), "--figure-variant", "nope"]) == 2
    assert "figure variant 'nope'" in capsys.readouterr().err


def test_readme_python_example_runs(monkeypatch, capsys):
    """The README's Python block runs as written (from the repository root)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    exec(compile(block, "README.md", "exec"), {})
    last = capsys.readouterr().out.strip().splitlines()[-1].split()
    t50, t10 = map(float, last)
    assert 0 < t50 < t10


def test_compare_reports_an_mlp_that_ran_out_of_steps(tmp_path):
    """A t_max the MLP cannot reach within max_steps: the run stops, and the report says where it stopped."""
    cfg_path = tmp_path / "short.toml"
    cfg_path.write_text(edited_default(("width = 1024", "width = 64"), ("batch = 2048", "batch = 128"),
                                       ('basis = "extended"', 'basis = "target"'),
                                       (DEFAULT_VARIANTS, 'variants = ["lazy", "rational"]'),   # the MLP's test
                                       ("seed = 0", "seed = 0\nn_test = 1000\nn_points = 10\nntk_probe = 32\n"
                                                    "max_steps = 5\ncompile = false")))
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="not reached within max_steps = 5"):
        assert main(["compare", str(cfg_path), "--out", str(out), "--quiet"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["mlp"]["complete"] is False and rep["mlp"]["reached_t"] < 300.0
    assert f"MLP stopped early at t = {rep['mlp']['reached_t']:.4g}" in (out / "report.md").read_text()


def test_convergence_study_example(tmp_path, monkeypatch):
    """examples/convergence_study.py on a tiny suite: every (width, basis, variant) row, one training per width and
    one ODE solve per basis, and every field of a row equal to a plain `compare` of the same config — checked on the
    width that is not the suite's base width."""
    from featureode.workflow import compare
    from featureode.workflow import grid
    from featureode.workflow import sweeps

    monkeypatch.setattr(grid, "SUITES_DIR", tmp_path / "suites")
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "tiny.toml").write_text(TINY_SUITE)
    study = _load_script("convergence_study")
    calls = {"mlp_trajectory": 0, "solve_config": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name in calls:
        monkeypatch.setattr(study, name, counted(name, getattr(study, name)))
    out = tmp_path / "study"
    rows = study.main(["--out", str(out), "--suite", "tiny", "--case", "z0_z1_d8_g0.5", "--widths", "32", "64",
                       "--bases", "3:1", "8:2", "--quiet"])
    assert calls == {"mlp_trajectory": 2, "solve_config": 2}
    assert [(r["width"], r["max_modes"], r["variant"]) for r in rows] == [
        (w, m, v) for w in (32, 64) for m in (3, 8) for v in ("lazy", "displacement")]
    assert "| 32 | +2, ≤ 8 (" in (out / "study.md").read_text()
    assert len(json.loads((out / "study.json").read_text())) == len(rows)
    tiny = sweeps.apply_basis(grid.load_grid(grid.suite_path("tiny")), "extended")
    cfg = sweeps.point_config(tiny, "z0_z1_d8_g0.5").replace(
        network={"width": 32}, ode={"extended_max_modes": 8, "extended_degree": 2})
    ref = compare.compare_config(cfg, tmp_path / "ref", progress=False)
    for variant in ("lazy", "displacement"):
        row = next(r for r in rows if (r["width"], r["max_modes"], r["variant"]) == (32, 8, variant))
        v = ref.variants[variant]
        assert row["t50_ratio"] == v.metrics.t50_ratio
        assert row["t10_ratio"] == v.metrics.t10_ratio
        assert row["in_support_t10_ratio"] == v.in_support.t10_ratio.value
        assert row["ode_loss_end"] == pytest.approx(v.loss[-1], rel=1e-12)
        assert row["mlp_loss_end"] == pytest.approx(ref.mlp.loss[-1], rel=1e-12)
        assert row["mlp_in_support_end"] == pytest.approx(
            ref.mlp.in_support_loss[-1] / ref.mlp.in_support_loss[0], rel=1e-12)
        assert row["modes"] == len(ref.modes) and row["t_end"] == ref.mlp.t[-1]
    with pytest.raises(SystemExit):
        study.main(["--out", str(out), "--suite", "tiny", "--case", "nope"])


def test_readme_extending_examples_run(monkeypatch, capsys):
    """The "Extending featureode" page's blocks (docs/guide/extending.md, moved there from the README) run as written
    (from the repository root) and print what their comments say: a half-strength displacement closure learns between
    lazy and displacement; the cubic σ = u³ − u = He_3 + 2 He_1 has μ = (0, 2, 0, √6); a backend registered by name
    gives the NumPy backend's curve."""
    from featureode.calculus import activations
    from featureode.ode import variants

    monkeypatch.setattr(variants, "CLOSURES", variants.CLOSURES.copy())  # leave the registries as they were
    monkeypatch.setattr(activations, "ACTIVATIONS", activations.ACTIVATIONS.copy())
    section = (ROOT / "docs" / "guide" / "extending.md").read_text()
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    assert len(blocks) == 5
    monkeypatch.chdir(ROOT)
    exec(compile(blocks[0], "extending.md", "exec"), {})
    t10 = {line.split()[0]: float(line.split()[1]) for line in capsys.readouterr().out.strip().splitlines()}
    assert t10["lazy"] > t10["half_displacement"] > t10["displacement"]
    exec(compile(blocks[1], "extending.md", "exec"), {})
    mu, lam = capsys.readouterr().out.strip().splitlines()
    assert np.allclose(eval(mu), [0.0, 2.0, 0.0, math.sqrt(6)], atol=1e-12)
    assert eval(lam)[0] > 0
    from featureode.ode import compile as fcompile

    monkeypatch.setattr(fcompile, "BACKENDS", fcompile.BACKENDS.copy())
    exec(compile(blocks[2], "extending.md", "exec"), {})
    t10 = dict(line.split() for line in capsys.readouterr().out.strip().splitlines())
    assert t10["numpy"] == t10["numpy_echo"] and float(t10["numpy"]) > 0
    # a parametrization: linear σ, λ_z0 = g_0 (readout part) + E[a²] g_0 (first-layer part), closed form 2 and 5
    from featureode.kernel import parametrization as fpar
    from featureode.workflow import executors as fexec

    try:   # the config's check reads the registry object itself: register into it, then take the name out again
        exec(compile(blocks[3], "extending.md", "exec"), {})
    finally:
        if "wide_readout" in fpar.PARAMETRIZATIONS:
            fpar.PARAMETRIZATIONS.unregister("wide_readout")
    ratio = dict(line.split() for line in capsys.readouterr().out.strip().splitlines())
    assert float(ratio["meanfield"]) == pytest.approx(2.0, rel=1e-9)
    assert float(ratio["wide_readout"]) == pytest.approx(5.0, rel=1e-9)
    # an executor: the sweep ran every point of the grid through it (one task per run, one results row per variant)
    from featureode.workflow.grid import load_grid

    grid = load_grid(ROOT / "examples" / "grids" / "sweep_richness_dim.toml")
    try:
        exec(compile(blocks[4], "extending.md", "exec"), {})
    finally:
        if "serial" in fexec.EXECUTORS:
            fexec.EXECUTORS.unregister("serial")
    submitted, rows = map(int, capsys.readouterr().out.strip().splitlines()[-1].split())
    assert submitted >= 1 and rows == grid.n_runs * 2        # lazy and displacement, every run of the grid


def test_python_api_population_example_runs(monkeypatch, capsys):
    """The Python API page's exact-population-loss block (docs/guide/python-api.md) runs as written and prints
    ``½E[(f − f*)²]``, ``E[f²]`` and ``E[f f*]`` of its network, each within 4 standard errors of a Monte Carlo
    estimate from 4·10⁵ fresh Gaussian samples of the same network (drawn again from the block's seed)."""
    section = (ROOT / "docs" / "guide" / "python-api.md").read_text()
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    block = next(b for b in blocks if "population_loss" in b)
    monkeypatch.chdir(ROOT)
    exec(compile(block, "python-api.md", "exec"), {})
    loss, network_sq, overlap = map(float, capsys.readouterr().out.split())
    from featureode.calculus.targets import parse_target

    target = parse_target("h2(z0)*z1", 4)
    rng = np.random.default_rng(0)
    a, w_hat, b = rng.normal(size=64) / 64, rng.normal(size=(64, 4)), 0.5 * rng.normal(size=64)
    z = np.random.default_rng(11).normal(size=(400_000, 4))
    f, y = np.maximum(z @ w_hat.T + b, 0.0) @ a, target.evaluate(z)
    for got, sample in ((loss, 0.5 * (f - y) ** 2), (network_sq, f * f), (overlap, f * y)):
        assert abs(got - sample.mean()) <= 4 * sample.std() / math.sqrt(sample.size)
