"""Feature ODE solving: analytic and hand-written references, the compiled RODAS4 integrator against SciPy's
``solve_ivp`` at tight tolerances and against its own order of accuracy, every closure on every target, events,
blow-up, the ``solve_config``/``solve_batch`` output (``ODEResult`` files) and the custom-closure example."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from _ode_theories import TARGETS, extended_theory, make_theory, theory_from_modes
from featureode.ode import integrate
from featureode.kernel import theory as kernel
from featureode.ode.compile import compile_system
from featureode.config import config_from_dict
from featureode.ode.solve import NonFiniteStateError, SolveError, solve_batch, solve_config, solve_variant, system_inputs
from featureode.results.trajectory import ODEResult, Trajectory
from featureode.ode.variants import Variant

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("eigenvalues, method", [("exact", "rodas4"), ("hea", "rodas4"), ("exact", "LSODA")])
def test_lazy_closure_matches_analytic_solution(eigenvalues, method):
    """Lazy flow on the target basis: ``f_β = v_β (1 − e^{−λ_β t})``."""
    theory = make_theory("staircase(3)")
    sol = solve_variant(theory, "lazy", 2e3, eigenvalues, method=method)
    assert isinstance(sol, Trajectory) and sol.kind == "ode" and sol.name == "lazy" and sol.status.ok
    lam = theory.lambda0(eigenvalues)
    expected = theory.target * (1 - np.exp(-np.outer(sol.t, lam)))
    np.testing.assert_allclose(sol.f, expected, atol=1e-6)
    np.testing.assert_allclose(sol.lam, np.broadcast_to(lam, sol.lam.shape), rtol=1e-12)
    loss = np.sum(theory.target**2 * np.exp(-2 * np.outer(sol.t, lam)), axis=1) / np.sum(theory.target**2)
    np.testing.assert_allclose(sol.loss, loss, atol=1e-6)
    # t50, t10: roots of the analytic L(t)/L(0) = Σ v² e^{−2λt}/Σ v² − level, found by brentq
    for level, t_cross in ((0.5, sol.t50), (0.1, sol.t10)):
        ref = brentq(lambda t: np.sum(theory.target**2 * np.exp(-2 * lam * t)) / np.sum(theory.target**2) - level,
                     0.0, 2e3, xtol=1e-12, rtol=1e-14)
        assert t_cross == pytest.approx(ref, rel=1e-5), level


@pytest.mark.parametrize("mode, order", [("z0", 1), ("h2(z0)", 2)])
def test_one_mode_agop_matches_hand_written_ode(mode, order):
    """``df/dt = λ(0) (1 + κ β_0 f²/g_0)^{β_0} (v − f)``, integrated independently by scipy."""
    theory = theory_from_modes({mode: 0.9}, dim=4)
    lam0, g0, v, kappa = theory.lambda_exact[0], theory.g[0], 0.9, 2.0
    sol = solve_variant(theory, Variant("agop", kappa=kappa), 500.0, method="Radau", rtol=1e-10, atol=1e-12)

    def hand(t, y):
        return [lam0 * (1 + kappa * order * y[0] ** 2 / g0) ** order * (v - y[0])]

    ref = solve_ivp(hand, (0, 500.0), [0.0], t_eval=sol.t, method="Radau", rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sol.f[:, 0], ref.y[0], atol=1e-7)
    np.testing.assert_allclose(sol.r[:, 0], 1 + kappa * order * sol.f[:, 0] ** 2 / g0, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_every_closure_reaches_t_max_with_finite_values(target):
    theory = make_theory(target)
    for variant in (Variant("lazy"), Variant("agop"), Variant("displacement"), Variant("displacement", scale=True)):
        sol = solve_variant(theory, variant, 1e4)
        assert sol.t[-1] == pytest.approx(1e4) and sol.t.size == 200
        for arr in (sol.f, sol.get("D"), sol.lam, sol.r, sol.get("s"), sol.loss):
            assert np.all(np.isfinite(arr))
        assert sol.loss[0] == 1.0 and sol.loss[-1] < sol.loss[0]
        # target basis: df_β/dt = λ_β(t)(v_β − f_β) with λ_β(t) = λ_β(0) s Π r_i^{β_i} > 0 (r_i, s ≥ 1), so each
        # f_β moves monotonically from 0 towards v_β without overshoot and the loss never increases (up to the
        # integration error, ~10 × the solver's rtol = 1e-8, once f_β has converged)
        assert np.all(sol.lam >= theory.lambda_exact * (1 - 1e-12)) and np.all(sol.r >= 1 - 1e-12)
        frac = sol.f / theory.target
        assert np.all(frac >= -1e-7) and np.all(frac <= 1 + 1e-7) and np.all(np.diff(frac, axis=0) >= -1e-7)
        assert np.all(np.diff(sol.loss) <= 1e-10)


def test_extended_basis_reaches_t_max_and_couples_modes():
    theory = extended_theory("staircase(2)", 6)
    for closure in ("lazy", "agop", "displacement"):
        sol = solve_variant(theory, closure, 1e4, basis="extended")
        assert sol.t[-1] == pytest.approx(1e4) and np.all(np.isfinite(sol.f))
        assert np.max(np.abs(sol.f[:, theory.target == 0])) > 1e-4    # extra modes are driven by the coupling
    cut = solve_variant(theory, Variant("lazy", ablate=["mode_coupling"]), 1e4, basis="extended")
    np.testing.assert_array_equal(cut.f[:, theory.target == 0], 0.0)


def test_displacement_speeds_up_the_staircase():
    theory = make_theory("staircase(3)")
    lazy, disp = (solve_variant(theory, c, 1e4) for c in ("lazy", "displacement"))
    assert disp.t10 < lazy.t10 and disp.t50 <= lazy.t50


def test_t50_t10_are_the_first_crossings():
    sol = solve_variant(make_theory("staircase(2)"), "displacement", 1e3, n_points=400)
    for level, t_cross in ((0.5, sol.t50), (0.1, sol.t10)):
        k = int(np.argmax(sol.loss <= level))
        assert sol.t[k - 1] < t_cross <= sol.t[k]
        interp = np.exp(np.interp(np.log(level), np.log(sol.loss[[k, k - 1]]), np.log(sol.t[[k, k - 1]])))
        assert t_cross == pytest.approx(interp, rel=1e-2)
    assert solve_variant(make_theory("staircase(3)"), "lazy", 5.0).t10 is None


def test_non_finite_state_stops_and_keeps_what_was_computed():
    """``df/dt = f² + 1`` blows up at t = π/2."""
    theory = make_theory("staircase(2)")
    with pytest.raises(NonFiniteStateError, match=r"at t ≈ 1\.570\d* in f_β of mode z0") as err:
        solve_variant(theory, Variant("lazy", replace={"kernel_flow": "f[b]**2 + 1"}), 10.0)
    sol = err.value.trajectory
    assert sol.status.error == str(err.value) and not sol.status.complete
    assert sol.t.size > 100 and sol.t[-1] < np.pi / 2 and np.all(np.isfinite(sol.f))
    np.testing.assert_allclose(sol.f[:, 0], np.tan(sol.t), rtol=1e-5)


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match=r"method 'rk4' is unknown; valid: rodas4"):
        solve_variant(make_theory("z0"), "lazy", 10.0, method="rk4")


def test_extended_basis_needs_the_gram_matrix():
    with pytest.raises(SolveError, match="with_gram=True"):
        solve_variant(make_theory("z0"), "lazy", 10.0, basis="extended")


def _config(tmp_path: Path, **ode):
    return config_from_dict({"data": {"dim": 8}, "target": {"expr": "staircase(2)"},
                             "training": {"t_max": 500.0}, "ode": {"n_points": 50, **ode}}, source=str(tmp_path))


def test_solve_config_writes_the_design_schema(tmp_path, monkeypatch):
    theory = make_theory("staircase(2)")
    monkeypatch.setattr(kernel, "kernel_theory", lambda cfg, basis=None, with_gram=False: theory, raising=False)
    cfg = _config(tmp_path, variants=["lazy", "agop", "displacement"])
    result = solve_config(cfg, tmp_path)
    assert isinstance(result, ODEResult) and not result.errors
    written = json.loads((tmp_path / "ode.json").read_text())
    assert written == json.loads(json.dumps(result.to_json()))
    loaded = ODEResult.load(tmp_path)
    np.testing.assert_array_equal(loaded.variants["agop"].f, result.variants["agop"].f)
    assert written["modes"] == ["z0", "z0*z1"] and written["target"] == pytest.approx([2**-0.5] * 2)
    assert list(written["variants"]) == ["lazy", "agop", "displacement"]
    for entry in written["variants"].values():
        assert {"t", "loss", "t50", "t10", "f", "lambda"} <= set(entry)
        assert len(entry["t"]) == len(entry["loss"]) == 50 and entry["t"][-1] == pytest.approx(500.0)
        assert np.shape(entry["f"]) == np.shape(entry["lambda"]) == (50, 2)
        assert entry["t50"] is None or 0 < entry["t50"] < 500.0
    npz = np.load(tmp_path / "ode.npz")
    np.testing.assert_allclose(npz["displacement/loss"], written["variants"]["displacement"]["loss"])


def test_solve_config_keeps_partial_output_of_a_failing_variant(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel, "kernel_theory", lambda cfg, basis=None, with_gram=False: make_theory("staircase(2)"),
                        raising=False)
    cfg = _config(tmp_path, variants=["lazy", "boom"], custom={"boom": {"closure": "lazy",
                                                                         "replace": {"kernel_flow": "f[b]**2 + 1"}}})
    result = solve_config(cfg, tmp_path)
    assert list(result.errors) == ["boom"] and "non-finite" in result.errors["boom"]
    written = json.loads((tmp_path / "ode.json").read_text())
    assert "error" in written["variants"]["boom"] and len(written["variants"]["boom"]["t"]) > 10
    assert "error" not in written["variants"]["lazy"] and written["variants"].keys() == {"lazy", "boom"}


def test_solve_batch_equals_solve_config_per_config(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel, "kernel_theory", lambda cfg, basis=None, with_gram=False: pytest.fail("rebuilt"),
                        raising=False)
    cfgs = [_config(tmp_path, variants=["lazy", "displacement"]).replace(network={"richness": g})
            for g in (0.1, 0.5)]
    theories = [make_theory("staircase(2)", gamma=g) for g in (0.1, 0.5)]
    batch = solve_batch(cfgs, theories, out_dirs=[tmp_path / "a", None])
    assert (tmp_path / "a" / "ode.json").exists() and len(batch) == 2
    for cfg, theory, res in zip(cfgs, theories, batch):
        one = solve_config(cfg, theory=theory)
        for name, tr in one.variants.items():
            np.testing.assert_array_equal(res.variants[name].loss, tr.loss)
    assert batch[1].variants["displacement"].t10 < batch[0].variants["displacement"].t10


CLOSURES = [Variant("lazy"), Variant("agop"), Variant("displacement"), Variant("displacement", scale=True),
            # a residual term whose Jacobian is not [[·, ·], [−I, 0]]: the integrator's full-size LU path
            Variant("displacement", replace={"residual_integral": "(v[b] - f[b])*(1 + f[b]**2)"})]


def _check_against_radau(variant: Variant, basis: str) -> None:
    """The compiled integrator at its default tolerances against SciPy's Radau at rtol = 1e-13 (the reference
    backend: another integrator, with its own error control and dense output, on the same generated right-hand
    side, whose NumPy and numba versions test_compile checks against each other and SymPy): curves to 1e-5 in
    log-loss where L/L(0) > 1e-6 (the default atol = 1e-10 bounds the accuracy of smaller losses), f_β to 1e-7,
    crossing times to 1e-6 relative."""
    theory = extended_theory("staircase(2)", 6) if basis == "extended" else make_theory("staircase(3)")
    sol = solve_variant(theory, variant, 1e3, basis=basis)
    inputs, system = system_inputs(theory, variant, basis=basis)
    code = compile_system(system, "numba")
    m = theory.target.size
    ref = solve_ivp(lambda t, y: code.rhs(y, *inputs), (0, 1e3), np.zeros(2 * m), method="Radau", t_eval=sol.t,
                    rtol=1e-13, atol=1e-15, jac=lambda t, y: code.jac(y, *inputs), dense_output=True)
    loss = np.sum((theory.target - ref.y[:m].T) ** 2, axis=1) / np.sum(theory.target**2)
    ok = loss > 1e-6
    assert np.max(np.abs(np.log(sol.loss[ok]) - np.log(loss[ok]))) < 1e-5
    np.testing.assert_allclose(sol.f, ref.y[:m].T, atol=1e-7)
    for level, t_cross in ((0.5, sol.t50), (0.1, sol.t10)):
        k = int(np.argmax(loss <= level))
        exact = brentq(lambda t: np.sum((theory.target - ref.sol(t)[:m]) ** 2) / np.sum(theory.target**2) - level,
                       sol.t[k - 1], sol.t[k], xtol=1e-14, rtol=1e-15)
        assert t_cross == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize("basis, variant", [("target", CLOSURES[2]), ("extended", CLOSURES[1]),
                                            ("target", CLOSURES[4])], ids=lambda x: getattr(x, "label", x))
def test_rodas4_matches_solve_ivp_at_tight_tolerances(basis, variant):
    _check_against_radau(variant, basis)


@pytest.mark.slow
@pytest.mark.parametrize("variant", CLOSURES, ids=lambda v: v.label)
@pytest.mark.parametrize("basis", ["target", "extended"])
def test_rodas4_matches_solve_ivp_every_closure(variant, basis):
    _check_against_radau(variant, basis)


def test_rodas4_step_has_local_error_of_order_five(monkeypatch):
    """One RODAS4 step (the pure-Python template) on ``y' = −y³``, ``y(0) = 1`` (``y = (1 + 2t)^{−1/2}``): the local
    error falls as ``h⁵`` (order 4), which fails for any wrong coefficient of the order conditions up to 4."""
    monkeypatch.setattr(integrate, "rhs", lambda y: -y**3, raising=False)
    errors = []
    for h in (0.04, 0.02, 0.01):
        y0 = np.ones(1)
        ks, ynew = np.empty((6, 1)), np.empty(1)
        used = integrate._rodas_step(y0, (), np.array([[-3.0]]), False, h, np.empty((1, 1)), None,
                                     np.zeros(1, dtype=int), None, ks, ynew, integrate.A, integrate.C, integrate.M,
                                     integrate.GAMMA)
        assert used == 6
        errors.append(abs(ynew[0] - (1 + 2 * h) ** -0.5))
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 4.7), orders


@pytest.mark.parametrize("s", [0.3, 0.5, 0.8])
def test_rodas4_dense_output_is_of_order_three(monkeypatch, s):
    """The dense output between a step's ends (:data:`integrate.D`) on ``y' = −y³`` (``y = (1 + 2t)^{−1/2}``): its
    error at ``t = s h`` falls as ``h⁴`` (an interpolant of order 3; any wrong coefficient leaves ``h²`` or ``h³``),
    and it is exact at both ends."""
    monkeypatch.setattr(integrate, "rhs", lambda y: -y**3, raising=False)
    errors = []
    for h in (0.02, 0.01, 0.005):
        y0 = np.ones(1)
        ks, ynew = np.empty((6, 1)), np.empty(1)
        integrate._rodas_step(y0, (), np.array([[-3.0]]), False, h, np.empty((1, 1)), None, np.zeros(1, dtype=int),
                              None, ks, ynew, integrate.A, integrate.C, integrate.M, integrate.GAMMA)
        q2, q3 = integrate.D[:, :5] @ ks[:5]

        def dense(x: float) -> float:
            return float(((1 - x) * y0 + x * (ynew + (1 - x) * (q2 + x * q3)))[0])

        assert dense(0.0) == y0[0] and dense(1.0) == ynew[0]
        errors.append(abs(dense(s) - (1 + 2 * s * h) ** -0.5))
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 3.6), orders


def test_custom_closure_example_runs(tmp_path):
    spec = importlib.util.spec_from_file_location("custom_closure", ROOT / "examples" / "custom_closure.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = example.main(theory=make_theory("staircase(2)", 16), out_dir=tmp_path)
    assert set(out) == {"displacement", "exp_displacement"}
    assert out["exp_displacement"]["t10"] < out["displacement"]["t10"]
    assert "exp\\_displacement" in (tmp_path / "custom_closure.tex").read_text()


def test_numpy_integrator_equals_the_compiled_one_and_a_compile_says_so_once(tmp_path, monkeypatch, capsys):
    """``rodas4`` without numba (the same RODAS4 in NumPy, what a solve runs while the numba code is not cached)
    against the compiled integrator, on a fresh cache: every output time, the crossing times and the work counters
    agree (round-off apart); compiling prints one line on stderr naming the cache, and nothing once it is cached.
    The full-size LU (a residual term whose Jacobian is not [[·, ·], [−I, 0]]) and the Schur-complement one both run."""
    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    theory = extended_theory("staircase(2)", 4)
    for variant in (CLOSURES[2], CLOSURES[4]):
        slow = solve_variant(theory, variant, 1e3, basis="extended", compile=False)
        assert slow.meta["info"]["backend"] == "numpy" and capsys.readouterr().err == ""
        fast = solve_variant(theory, variant, 1e3, basis="extended", compile=True)
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("featureode: compiling") and str(tmp_path) in err[0]
        assert fast.meta["info"]["backend"] == "numba"
        again = solve_variant(theory, variant, 1e3, basis="extended")  # default: numba, now that it is cached
        assert again.meta["info"]["backend"] == "numba" and capsys.readouterr().err == ""
        np.testing.assert_array_equal(slow.t, fast.t)
        np.testing.assert_allclose(slow.f, fast.f, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(slow.loss, fast.loss, rtol=1e-9, atol=1e-15)
        assert slow.t50 == pytest.approx(fast.t50, rel=1e-10) and slow.t10 == pytest.approx(fast.t10, rel=1e-10)
        assert abs(slow.meta["info"]["nfev"] - fast.meta["info"]["nfev"]) <= 12  # the same steps, give or take one
