"""replay: the kernel flow driven by measured eigenvalues, against exact solutions and against the ODE itself."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.linalg import expm

from _configs import DEFAULT_VARIANTS, edited_default
from _ode_theories import make_theory
from featureode.ode.replay import ReplayError, integrated_eigenvalue, replay, replay_run
from featureode.ode.solve import solve_variant
from featureode.results.trajectory import Trajectory


def _mlp(t: np.ndarray, lam: np.ndarray | None, v: np.ndarray, modes: tuple[str, ...], **arrays) -> Trajectory:
    return Trajectory("mlp", "mlp", modes, v, t, np.ones_like(t), lam=lam, arrays=arrays)


def _times(n: int = 400, t_max: float = 50.0) -> np.ndarray:
    return np.concatenate([[0.0], np.geomspace(1e-2, t_max, n)])


def test_constant_eigenvalue_gives_the_exponential_solution():
    t = _times()
    lam = np.tile([0.3, 0.05], (t.size, 1))
    v = np.array([1.0, 0.5])
    rep = replay(_mlp(t, lam, v, ("z0", "z0*z1")))
    expected = np.sum((v * np.exp(-lam[0] * rep.t[:, None])) ** 2, axis=1) / np.sum(v**2)
    np.testing.assert_allclose(rep.loss, expected, rtol=1e-12)
    assert rep.kind == "ode" and rep.name == "replay"
    assert rep.meta["uses_measurements"] is True and rep.meta["parameter_free"] is False


def test_growing_eigenvalue_integral_is_exact_for_its_interpolant_and_converges():
    # λ(t) = λ0 e^{kt}: ∫_0^τ λ = λ0 (e^{kτ} − 1)/k; the log-linear interpolant converges as the grid refines
    lam0, k = 0.2, 0.15
    errs = []
    for n in (100, 400, 1600):
        t = _times(n, 20.0)
        got = integrated_eigenvalue(t, (lam0 * np.exp(k * t))[:, None], [5.0, 12.0, 20.0])[:, 0]
        exact = lam0 * (np.exp(k * np.array([5.0, 12.0, 20.0])) - 1) / k
        errs.append(np.max(np.abs(got / exact - 1)))
    assert errs[-1] < 1e-4 and errs[0] / errs[-1] > 8          # second-order convergence in the grid step
    # a function that is exactly linear in log t between the samples is integrated to rounding
    t = _times(50, 10.0)
    lam = 1.0 + 0.3 * np.log(np.maximum(t, 1e-2) / 1e-2)
    got = integrated_eigenvalue(t, lam[:, None], [10.0])[0, 0]
    exact = 1.0 * 1e-2 + (10.0 - 1e-2) + 0.3 * (10.0 * math.log(10.0 / 1e-2) - (10.0 - 1e-2))
    assert got == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("closure", ["displacement", "second_order"])
def test_replaying_a_closures_eigenvalues_reproduces_its_curve(closure):
    theory = make_theory("staircase(2)", 8)
    if closure == "second_order":
        theory = dataclasses.replace(theory, activation="relu", bias_std=0.5)
    sol = solve_variant(theory, closure, 200.0, n_points=600)
    mlp = _mlp(sol.t, sol.lam, sol.target, tuple(map(str, sol.modes)))
    rep = replay(mlp, n_points=10)
    on_grid = np.interp(sol.t, rep.t, rep.loss)
    np.testing.assert_allclose(on_grid, sol.loss, rtol=2e-3, atol=1e-6)
    assert rep.t50 == pytest.approx(sol.t50, rel=2e-3) and rep.t10 == pytest.approx(sol.t10, rel=2e-3)


def test_extended_replay_with_a_constant_gram_is_the_matrix_exponential():
    t = _times(200, 30.0)
    K = np.array([[0.5, 0.1, 0.0], [0.1, 0.2, 0.05], [0.0, 0.05, 0.1]])
    v = np.array([1.0, 0.0, 0.4])
    rep = replay(_mlp(t, None, v, ("z0", "1", "h2(z0)"), gram=np.tile(K, (t.size, 1, 1))), basis="extended")
    for k in (50, 120, 200):
        f = (np.eye(3) - expm(-K * rep.t[k])) @ v
        np.testing.assert_allclose(rep.f[k], f, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(rep.lam[-1], np.diag(K))


def test_missing_measurements_are_named(tmp_path):
    with pytest.raises(ReplayError, match=r"mlp\.json does not exist; run `featureode simulate"):
        replay_run(tmp_path)
    t = _times(10)
    with pytest.raises(ReplayError, match="needs the measured eigenvalues 'lambda'"):
        replay(_mlp(t, None, np.ones(1), ("z0",)))
    with pytest.raises(ReplayError, match="needs the measured Gram 'gram'"):
        replay(_mlp(t, np.ones((t.size, 1)), np.ones(1), ("z0",)), basis="extended")
    with pytest.raises(ReplayError, match="kind 'mlp'"):
        replay(Trajectory("ode", "x", ("z0",), np.ones(1), t, np.ones_like(t), lam=np.ones((t.size, 1))))


def test_replay_of_a_stored_run(tmp_path):
    t = _times(50)
    lam = np.tile([0.3], (t.size, 1))
    _mlp(t, lam, np.ones(1), ("z0",)).save(tmp_path, "mlp")
    rep = replay_run(tmp_path)
    assert rep.t50 == pytest.approx(math.log(2) / (2 * 0.3), rel=1e-3)
    assert rep.meta["source"].endswith("mlp.json")


def test_compare_adds_replay_and_diagnostics(tmp_path):
    """``compare`` with ``replay`` listed: the replay is computed from this run's mlp.json after the simulation,
    written into ode.json and report.json beside the closures (marked as using measurements), reproduces the
    target-basis solution from the measured λ(t), and every report has its diagnostics figure; ``solve`` refuses it."""
    from scipy.integrate import quad

    from featureode.cli import main
    from featureode.results.trajectory import ODEResult

    cfg_path = tmp_path / "small.toml"
    cfg_path.write_text(edited_default(("width = 1024", "width = 64"), ("batch = 2048", "batch = 128"),
                                       ("t_max = 300.0", "t_max = 10.0"), ('basis = "extended"', 'basis = "target"'),
                                       (DEFAULT_VARIANTS, 'variants = ["lazy", "replay", "displacement"]'),
                                       ("seed = 0", "seed = 0\nn_test = 1000\nn_points = 10\nntk_probe = 32")))
    out = tmp_path / "out"
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet"]) == 0
    ode = ODEResult.load(out)
    assert list(ode.variants) == ["lazy", "replay", "displacement"]
    rep = ode.variants["replay"]
    assert rep.meta["uses_measurements"] is True and rep.meta["parameter_free"] is False
    mlp = Trajectory.load(out, "mlp")
    # independent check at the measurement times: f_β = v_β (1 − exp(−∫_0^t λ_β)), the integral by adaptive
    # quadrature of the interpolant (λ linear in t on [0, t_1], linear in log t between later measurements)
    t, lam = np.asarray(mlp.t), np.asarray(mlp.lam)

    def lam_at(tau: float, b: int) -> float:
        k = min(int(np.searchsorted(t, tau, side="right")) - 1, t.size - 2)
        w = (tau - t[k]) / (t[k + 1] - t[k]) if t[k] <= 0 else math.log(tau / t[k]) / math.log(t[k + 1] / t[k])
        return (1 - w) * lam[k, b] + w * lam[k + 1, b]

    seg = np.array([[quad(lam_at, t[k], t[k + 1], args=(b,), epsabs=0, epsrel=1e-12)[0]
                     for b in range(lam.shape[1])] for k in range(t.size - 1)])
    integral = np.vstack([np.zeros((1, lam.shape[1])), np.cumsum(seg, axis=0)])
    f_exact = np.asarray(mlp.target) * (1 - np.exp(-integral))
    on_grid = [int(np.argmin(abs(rep.t - x))) for x in t]
    np.testing.assert_allclose(rep.f[on_grid], f_exact, rtol=1e-9, atol=1e-12)
    report = json.loads((out / "report.json").read_text())
    assert set(report["variants"]) == {"lazy", "replay", "displacement"}
    assert (out / "report_diagnostics.png").stat().st_size > 10_000
    assert main(["solve", str(cfg_path), "--out", str(tmp_path / "solve")]) == 2


def test_compare_on_the_extended_basis_measures_every_mode_for_replay(tmp_path):
    """With ``replay`` on the extended basis, the simulation measures the Gram on all of the ODE's modes, so the
    replay runs on the same basis as the closures; a finished simulation that measured fewer is reused with a
    warning that names the fix."""
    import warnings

    from featureode.cli import main
    from featureode.results.trajectory import ODEResult

    cfg_path = tmp_path / "small.toml"
    text = edited_default(("width = 1024", "width = 64"), ("batch = 2048", "batch = 128"),
                          ("t_max = 300.0", "t_max = 5.0"), ("dim = 16", "dim = 8"),
                          ("seed = 0", "seed = 0\nn_test = 1000\nn_points = 8\nntk_probe = 32"))
    assert text.count(DEFAULT_VARIANTS) == 1 and text.count('basis = "extended"') == 1
    cfg_path.write_text(text.replace(DEFAULT_VARIANTS, 'variants = ["lazy", "replay"]'))
    out = tmp_path / "out"
    assert main(["compare", str(cfg_path), "--out", str(out), "--quiet"]) == 0
    ode, mlp = ODEResult.load(out), Trajectory.load(out, "mlp")
    assert len(ode.modes) > 2 and mlp.modes == ode.modes                       # target modes first, then the rest
    rep = ode.variants["replay"]
    assert rep.status.error is None and tuple(rep.modes) == tuple(ode.modes)
    gram = np.asarray(mlp.arrays["gram"])
    assert gram.shape == (mlp.t.size, len(ode.modes), len(ode.modes))
    np.testing.assert_allclose(gram, np.swapaxes(gram, 1, 2), atol=1e-12)  # a Gram matrix is symmetric
    # a simulation of the target basis (fewer measured modes) is reused on the extended basis, with a warning
    other = tmp_path / "other"
    cfg_path.write_text(text.replace('basis = "extended"', 'basis = "target"')
                        .replace(DEFAULT_VARIANTS, 'variants = ["lazy", "replay"]'))
    assert main(["compare", str(cfg_path), "--out", str(other), "--quiet"]) == 0
    cfg_path.write_text(text.replace(DEFAULT_VARIANTS, 'variants = ["lazy", "replay"]'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["compare", str(cfg_path), "--out", str(other), "--quiet", "--force"]) == 0
    assert any("replay uses those. Delete mlp.json" in str(w.message) for w in caught)
