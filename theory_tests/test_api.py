"""The Python API without pitfalls: a theory solves what it was built for, one-line reprs, long tables."""
from __future__ import annotations

import numpy as np
import pytest

from _ode_theories import make_theory
from featureode.config import config_from_dict
from featureode.kernel.theory import kernel_theory
from featureode.ode.solve import SolveError, solve_config, solve_variant
from featureode.results.trajectory import Trajectory

pd = pytest.importorskip("pandas")

RAW = {"data": {"dim": 4}, "target": {"expr": "z0*z1"}, "network": {"activation": "erf"},
       "training": {"t_max": 200.0, "t_min": 0.5},
       "ode": {"variants": ["lazy", "displacement"], "basis": "extended", "extended_degree": 2,
               "extended_max_modes": 6, "n_points": 50}}


@pytest.fixture(scope="module")
def extended():
    cfg = config_from_dict(RAW)
    return cfg, kernel_theory(cfg)


def test_a_theory_solves_the_basis_and_settings_it_was_built_for(extended):
    """solve_variant(theory, name) on an extended-basis theory is the variant of solve_config (its basis, t_max,
    output times), not the target basis: the coupled extra modes move, which they cannot on the target basis."""
    cfg, theory = extended
    assert theory.basis == "extended" and len(theory.modes) > 1 and theory.settings["t_max"] == 200.0
    alone = solve_variant(theory, "displacement")
    ref = solve_config(cfg, theory=theory).variants["displacement"]
    np.testing.assert_array_equal(alone.t, ref.t)
    np.testing.assert_array_equal(alone.loss, ref.loss)
    assert alone.t[-1] == pytest.approx(200.0) and alone.t.size == 50 and alone.t[1] == pytest.approx(0.5)
    assert alone.meta["info"]["basis"] == "extended"
    extra = theory.target == 0
    assert np.max(np.abs(alone.f[:, extra])) > 1e-6  # the Gram matrix drives the modes outside the target
    target = solve_variant(kernel_theory(cfg, basis="target"), "displacement")
    assert target.meta["info"]["basis"] == "target" and target.t10 != alone.t10


def test_a_different_basis_or_a_missing_horizon_is_refused(extended):
    _, theory = extended
    with pytest.raises(SolveError, match=r"basis='target', but this kernel theory was built on the extended basis"):
        solve_variant(theory, "displacement", basis="target")
    with pytest.raises(SolveError, match="needs t_max"):
        solve_variant(make_theory("z0"), "lazy")  # hand-built: no config settings
    # a hand-built theory keeps the explicit-argument behaviour
    assert solve_variant(make_theory("z0"), "lazy", 10.0).meta["info"]["basis"] == "target"


def test_reprs_are_one_short_line(extended):
    cfg, theory = extended
    res = solve_config(cfg, theory=theory)
    tr = res.variants["displacement"]
    for obj, needles in ((tr, ["Trajectory(ode 'displacement'", "50 times", f"t10 = {tr.t10:.4g}", "ok"]),
                         (res, ["2 variants on the extended basis", f"lazy t50 = {res.variants['lazy'].t50:.4g}"]),
                         (theory, [f"{len(theory.modes)} modes on the extended basis", "d = 4", "Gram"]),
                         (cfg, ["'z0*z1'", "d = 4", "t_max = 200"])):
        text = repr(obj)
        assert "\n" not in text and len(text) < 320, text
        for n in needles:
            assert n in text, (n, text)
    failed = Trajectory.failed("agop", ["z0"], [1.0], "diverged at t = 3\n  (details)")
    assert repr(failed).endswith("error: diverged at t = 3 (details))")


def test_to_pandas_is_long_and_reads_back_the_arrays(extended):
    cfg, theory = extended
    res = solve_config(cfg, theory=theory)
    tr = res.variants["lazy"]
    df = tr.to_pandas()
    assert list(df.columns) == ["kind", "name", "t", "quantity", "component", "value"]
    f = df[df.quantity == "f"].pivot(index="t", columns="component", values="value")
    np.testing.assert_array_equal(f[list(tr.modes)].to_numpy(), tr.f)
    r = df[df.quantity == "r"]
    assert set(r.component) == {str(i) for i in range(4)} and len(r) == tr.t.size * 4
    loss = df[df.quantity == "ratio"].sort_values("t")
    np.testing.assert_array_equal(loss.value.to_numpy(), tr.loss / tr.loss[0])
    both = res.to_pandas()
    assert set(both.name) == {"lazy", "displacement"} and len(both) == len(df) + len(
        res.variants["displacement"].to_pandas())


def test_load_sweep_reads_every_run_into_one_table(tmp_path):
    from featureode.workflow.grid import grid_from_dict
    from featureode.workflow.sweeps import run_sweep
    from featureode.workflow.table import load_sweep

    grid = grid_from_dict({"set": {"data.dim": 4, "training.t_max": 20.0, "ode.variants": ["lazy"],
                                   "ode.basis": "target", "ode.n_points": 20},
                           "grid": {"target.expr": ["z0", "z1"]}, "sweep": {"seeds": [0]}})
    res = run_sweep(grid, tmp_path, ode_only=True, progress=False)
    assert not res.failed
    df = load_sweep(tmp_path)
    assert {"target.expr", "seed", "run", "kind", "name", "t", "quantity", "component", "value"} <= set(df.columns)
    assert set(df.quantity) == {"ratio", "in_support_loss"} and set(df["target.expr"]) == {"z0", "z1"}
    # an ODE-only sweep keeps its curves in one columnar file: the same numbers, and for one mode the lazy flow's
    # closed form L/L(0) = exp(−2 λ t) with the kernel's exact λ
    from featureode.config import config_from_dict
    from featureode.kernel.theory import kernel_theory
    from featureode.workflow.table import read_curves

    curves = read_curves(tmp_path)
    for point in grid.points():
        part = df[(df.quantity == "ratio") & (df["target.expr"] == point.values["target.expr"])].sort_values("t")
        mine = curves[(curves.run == part.run.iloc[0]) & (curves.variant == "lazy")].sort_values("t")
        np.testing.assert_array_equal(part.value.to_numpy(), mine.loss.to_numpy())
        lam = kernel_theory(config_from_dict(grid.raw_config(point, 0)), basis="target").lambda_exact[0]
        np.testing.assert_allclose(part.value.to_numpy(), np.exp(-2 * lam * part.t.to_numpy()), rtol=1e-6,
                                   atol=1e-12)
    assert set(load_sweep(tmp_path, quantities=None).quantity) >= {"loss", "ratio", "in_support_loss"}
