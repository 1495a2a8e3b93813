"""Activation calculus (theory §2) against independent numerical oracles.

Every activation is re-defined here directly in mpmath (not from the package's SymPy expression). The oracle for
``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]`` is a composite Gauss–Legendre rule at 30 digits on ``|ξ| ≤ 14`` with a
panel edge at every kink of σ, and ``He_n`` from the textbook recurrence ``He_{n+1} = ξ He_n − n He_{n−1}``; the
package uses closed forms or tanh-sinh quadrature over the whole line, so the two share no method. The oracle for
``mean_numpy`` is mpmath's tanh-sinh quadrature of the integration-by-parts form, while the package's fallback there
is double-precision Gauss–Legendre.
"""
from __future__ import annotations

import dataclasses
import math
import re
from functools import lru_cache
from typing import Callable

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mpmath.calculus.quadrature import GaussLegendre

from featureode.calculus.activations import ACTIVATIONS, ActivationError, B, S, from_expression, get_activation

mpf = mpmath.mpf
DPS = 30


def _relu(u):
    return u if u > 0 else mpf(0)


def _step(u):
    return mpf(1) if u > 0 else mpf(0)


# name -> (σ in mpmath, kinks of σ, σ' in mpmath written by hand)
ORACLES: dict[str, tuple[Callable, tuple, Callable]] = {
    "relu": (_relu, (0,), _step),
    "abs": (abs, (0,), lambda u: mpmath.sign(u)),
    "erf": (mpmath.erf, (), lambda u: 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-u * u)),
    "gelu": (lambda u: u * mpmath.ncdf(u), (), lambda u: mpmath.ncdf(u) + u * mpmath.npdf(u)),
    "step": (_step, (0,), lambda u: mpf(0)),
    "linear": (lambda u: u, (), lambda u: mpf(1)),
    "quadratic": (lambda u: u * u, (), lambda u: 2 * u),
    "tanh": (mpmath.tanh, (), lambda u: 1 - mpmath.tanh(u) ** 2),
    "sigmoid": (lambda u: 1 / (1 + mpmath.exp(-u)), (), lambda u: mpmath.exp(-u) / (1 + mpmath.exp(-u)) ** 2),
    "softplus": (lambda u: mpmath.log1p(mpmath.exp(u)), (), lambda u: 1 / (1 + mpmath.exp(-u))),
    "silu": (lambda u: u / (1 + mpmath.exp(-u)), (),
             lambda u: 1 / (1 + mpmath.exp(-u)) + u * mpmath.exp(-u) / (1 + mpmath.exp(-u)) ** 2),
}
EXACT = {"relu", "abs", "erf", "gelu", "step", "linear", "quadratic"}
POINTS = [(0.0, 1.0), (0.375, 1.25), (-0.7, 0.5)]  # (b, s), b ≠ 0 included
SLOW_POINTS = [(1.5, 2.0), (-2.0, 0.3), (0.1, 4.0)]
NMAX = 6


@lru_cache(maxsize=None)
def _gl_nodes() -> tuple:
    with mpmath.workdps(DPS):
        return tuple(GaussLegendre(mpmath.mp).calc_nodes(4, mpmath.mp.prec))  # 24 nodes on [-1, 1]


def oracle_moments(sigma: Callable, kinks: tuple, b: float, s: float, nmax: int) -> list:
    """``[E[σ(s ξ + b) He_n(ξ)] for n ≤ nmax]`` (unnormalised He_n) by composite Gauss–Legendre at 30 digits."""
    with mpmath.workdps(DPS):
        b, s, lim = mpf(b), mpf(s), mpf(14)
        cuts = sorted({-lim, lim} | {(mpf(c) - b) / s for c in kinks if abs((mpf(c) - b) / s) < lim})
        width = 1 / (2 * max(s, 1))
        out = [mpf(0)] * (nmax + 1)
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            panels = int(mpmath.ceil((hi - lo) / width))
            h = (hi - lo) / panels
            for p in range(panels):
                mid = lo + (p + mpf(0.5)) * h
                for x, w in _gl_nodes():
                    xi = mid + x * h / 2
                    f = sigma(s * xi + b) * mpmath.npdf(xi) * w * h / 2
                    he_prev, he = mpf(0), mpf(1)
                    for n in range(nmax + 1):
                        out[n] += f * he
                        he_prev, he = he, xi * he - n * he_prev
        return out


@lru_cache(maxsize=None)
def oracle_mu(name: str, b: float, s: float, nmax: int = NMAX) -> tuple:
    """``μ_n = E[σ He_n]/sqrt(n!)`` from the independent σ."""
    sigma, kinks, _ = ORACLES[name]
    with mpmath.workdps(DPS):
        return tuple(m / mpmath.sqrt(mpmath.factorial(n))
                     for n, m in enumerate(oracle_moments(sigma, kinks, b, s, nmax)))


def assert_close(got: float, ref, scale, rtol: float = 1e-12, what: str = "") -> None:
    """``|got − ref| ≤ rtol |ref| + 1e-15 scale`` (the absolute part covers coefficients that vanish)."""
    assert abs(mpf(got) - ref) <= rtol * abs(ref) + 1e-15 * scale, f"{what}: got {got!r}, expected {float(ref)!r}"


# ------------------------------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------------------------------
def test_registry_has_an_oracle_for_every_activation() -> None:
    assert set(ACTIVATIONS) == set(ORACLES)
    assert {n for n, a in ACTIVATIONS.items() if a.is_exact} == EXACT


def test_lookup() -> None:
    assert get_activation(" ReLU ") is ACTIVATIONS["relu"]
    assert get_activation(ACTIVATIONS["tanh"]) is ACTIVATIONS["tanh"]
    assert get_activation("u**2 + u").is_exact and not get_activation("u*tanh(u)").is_exact


# ------------------------------------------------------------------------------------------------------------------
# Hermite coefficients μ_n and derivative means m_k
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("b, s", POINTS + [pytest.param(*p, marks=pytest.mark.slow) for p in SLOW_POINTS])
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_hermite_coefficients_against_oracle(name: str, b: float, s: float) -> None:
    act = ACTIVATIONS[name]
    ref = oracle_mu(name, b, s)
    scale = max(abs(r) for r in ref)
    for n in range(NMAX + 1):
        c = act.hermite(n, b, s)
        assert_close(c.value, ref[n], scale, what=f"{name} μ_{n}({b}, {s})")
        if name in EXACT:
            assert c.exact is not None and isinstance(c.latex, str)
            assert_close(float(sp.N(c.exact, 25)), ref[n], scale, what=f"{name} exact μ_{n}")
        else:
            assert c.exact is None and c.latex is None and 0 <= c.error < 1e-25


@pytest.mark.parametrize("b, s", POINTS[1:])
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_derivative_means_by_integration_by_parts(name: str, b: float, s: float) -> None:
    """``m_k = E[σ^{(k)}(u)] = sqrt(k!) μ_k / s^k`` (Gaussian integration by parts), μ_k from the oracle."""
    act = ACTIVATIONS[name]
    ref = oracle_mu(name, b, s)
    for k in range(5):
        expected = ref[k] * mpmath.sqrt(mpmath.factorial(k)) / mpf(s) ** k
        assert_close(act.mean(k, b, s).value, expected, max(1.0, abs(expected)), what=f"{name} m_{k}")


@pytest.mark.parametrize("name", sorted(set(ORACLES) - {"step"}))
def test_first_derivative_mean_is_mean_of_derivative(name: str) -> None:
    """``m_1 = E[σ'(u)]`` with σ' written by hand (a.e. derivative: σ is continuous, its kinks have measure zero;
    the step's derivative is a Dirac mass, covered by ``test_relu_and_step_hand_forms``)."""
    b, s = -0.7, 0.5
    _, kinks, dsigma = ORACLES[name]
    expected = oracle_moments(dsigma, kinks, b, s, 0)[0]
    assert_close(ACTIVATIONS[name].mean(1, b, s).value, expected, 1.0, what=name)


def test_relu_and_step_hand_forms() -> None:
    """ReLU: m_1 = Φ(b/s), m_2 = φ(b/s)/s (density of u at 0); step: m_0 = Φ(b/s), m_1 = φ(b/s)/s."""
    relu, step = ACTIVATIONS["relu"], ACTIVATIONS["step"]
    for b, s in POINTS:
        t = mpf(b) / s
        assert_close(relu.mean(1, b, s).value, mpmath.ncdf(t), 1.0)
        assert_close(relu.mean(2, b, s).value, mpmath.npdf(t) / s, 1.0)
        assert_close(step.mean(0, b, s).value, mpmath.ncdf(t), 1.0)
        assert_close(step.mean(1, b, s).value, mpmath.npdf(t) / s, 1.0)


def test_relu_design_closed_form() -> None:
    """theory §2: ReLU (b=0, s=1) E[σ He_n] = 1/sqrt(2π), 1/2, then 0 for odd n ≥ 3, (−1)^{n/2−1}(n−3)!!/sqrt(2π)."""
    relu = ACTIVATIONS["relu"]

    def design(n: int) -> sp.Expr:
        if n == 0:
            return 1 / sp.sqrt(2 * sp.pi)
        if n == 1:
            return sp.Rational(1, 2)
        if n % 2:
            return sp.Integer(0)
        return (-1) ** (n // 2 - 1) * sp.factorial2(n - 3) / sp.sqrt(2 * sp.pi)

    moments = oracle_moments(_relu, (0,), 0.0, 1.0, 12)
    for n in range(13):
        exact = relu.hermite(n, 0.0, 1.0).exact * sp.sqrt(sp.factorial(n))
        assert sp.simplify(exact - design(n)) == 0, n
        with mpmath.workdps(DPS):  # the formula itself, numerically
            assert abs(moments[n] - mpf(sp.N(design(n), DPS))) < 1e-25, n


@pytest.mark.parametrize("name", ["relu", "erf", "tanh", "softplus"])
def test_hermite_mp_to_thirty_digits(name: str) -> None:
    b, s = 0.375, 1.25  # exact binary fractions, so the exact and quadrature paths see the same (b, s)
    ref = oracle_mu(name, b, s)
    with mpmath.workdps(DPS):
        for n in (0, 3, 5):
            assert abs(ACTIVATIONS[name].hermite_mp(n, b, s) - ref[n]) < mpf(10) ** -26 * max(1, abs(ref[n]))


def test_zero_scale_limit() -> None:
    """s = 0: u = b exactly, so m_k = σ^{(k)}(b) and μ_n = σ(b) δ_{n0}."""
    relu, tanh = ACTIVATIONS["relu"], ACTIVATIONS["tanh"]
    assert relu.mean(0, 0.5, 0.0).value == 0.5 and relu.mean(1, 0.5, 0.0).value == 1.0
    assert relu.mean(1, -0.5, 0.0).value == 0.0
    assert relu.hermite(0, 0.5, 0.0).value == 0.5 and relu.hermite(2, 0.5, 0.0).value == 0.0
    assert tanh.mean(2, 0.3, 0.0).value == pytest.approx(float(-2 * mpmath.tanh(0.3) / mpmath.cosh(0.3) ** 2),
                                                          rel=1e-14)


def test_exact_expressions_are_functions_of_b_and_s() -> None:
    relu = ACTIVATIONS["relu"]
    for n in range(4):
        ex = relu.hermite_expr(n)
        assert ex.free_symbols <= {B, S}
        assert float(ex.subs({B: sp.Rational(3, 8), S: sp.Rational(5, 4)})) == pytest.approx(
            float(oracle_mu("relu", 0.375, 1.25)[n]), rel=1e-13, abs=1e-15)
    assert ACTIVATIONS["tanh"].hermite_expr(2) is None and ACTIVATIONS["tanh"].mean_expr(1) is None


# ------------------------------------------------------------------------------------------------------------------
# vectorised means
# ------------------------------------------------------------------------------------------------------------------
def tanh_sinh_mean(name: str, k: int, b: float, s: float) -> mpmath.mpf:
    """``m_k = E[σ(b + s ξ) He_k(ξ)] / s^k`` by mpmath's tanh-sinh, split at ξ = 0, at the kinks, and every 1/s
    around the activation's centre ``ξ = −b/s``."""
    sigma, kinks, _ = ORACLES[name]
    with mpmath.workdps(20):
        b_, s_ = mpf(b), mpf(s)
        c = -b_ / s_
        pts = sorted({mpf(0)} | {(mpf(q) - b_) / s_ for q in kinks} | {c + j / s_ for j in range(-4, 5)})
        he = [lambda x: 1, lambda x: x, lambda x: x * x - 1, lambda x: x**3 - 3 * x][k]
        val = mpmath.quad(lambda x: sigma(s_ * x + b_) * he(x) * mpmath.npdf(x), [-mpmath.inf, *pts, mpmath.inf])
        return val / s_**k


MEAN_POINTS = [(0.3, 0.5), (-1.2, 2.5), (0.7, 5.0)]  # large s: the regime where Gauss–Hermite fails


@pytest.mark.parametrize("name", sorted(set(ORACLES) - EXACT))
def test_mean_numpy_quadrature_against_tanh_sinh(name: str) -> None:
    act = ACTIVATIONS[name]
    b = np.array([p[0] for p in MEAN_POINTS])
    s = np.array([p[1] for p in MEAN_POINTS])
    for k in range(4):
        got = act.mean_numpy(k)(b, s)
        assert got.shape == (3,)
        for j, (bj, sj) in enumerate(MEAN_POINTS):
            ref = tanh_sinh_mean(name, k, bj, sj)
            assert abs(got[j] - ref) <= 1e-10 * abs(ref) + 1e-13, (name, k, bj, sj, got[j], float(ref))


@pytest.mark.parametrize("name", sorted(EXACT))
def test_mean_numpy_closed_form_against_oracle(name: str) -> None:
    """The lambdified closed forms vs ``m_k = sqrt(k!) μ_k / s^k`` from the Gauss–Legendre oracle."""
    b = np.array([p[0] for p in POINTS])
    s = np.array([p[1] for p in POINTS])
    for k in range(4):
        got = ACTIVATIONS[name].mean_numpy(k)(b, s)
        for j, (bj, sj) in enumerate(POINTS):
            ref = oracle_mu(name, bj, sj)[k] * mpmath.sqrt(mpmath.factorial(k)) / mpf(sj) ** k
            assert abs(got[j] - ref) <= 1e-12 * abs(ref) + 1e-15, (name, k, bj, sj, got[j], float(ref))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("name", sorted(EXACT))
def test_fused_means_against_oracle(name: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``means_numpy(ks)`` (every order in one pass: compiled loop or NumPy statements) vs the Gauss–Legendre
    oracle, with ``s`` broadcast over points and read once per row."""
    if backend == "numpy":
        monkeypatch.setenv("FEATUREODE_KERNEL_LOOPS", "numpy")
    ks = (0, 1, 2, 3)
    fn = ACTIVATIONS[name].means_numpy(ks)
    b = np.array([p[0] for p in POINTS])
    s = np.array([p[1] for p in POINTS])
    ref = np.array([[float(oracle_mu(name, bj, sj)[k] * mpmath.sqrt(mpmath.factorial(k)) / mpf(sj) ** k)
                     for bj, sj in POINTS] for k in ks])
    flat = fn(b, s)
    assert flat.shape == (len(ks), b.size)
    assert np.all(np.abs(flat - ref) <= 1e-12 * np.abs(ref) + 1e-15), (name, backend, flat - ref)
    # rows: b (n, q) with s (n, 1); row i at the points' b and a common s
    rows = fn(np.tile(b, (2, 1)), s[:2, None])
    assert rows.shape == (len(ks), 2, b.size)
    for i in range(2):
        np.testing.assert_allclose(rows[:, i], fn(b, np.full(b.size, s[i])), rtol=1e-14, atol=1e-16)
        np.testing.assert_allclose(rows[:, i, i], ref[:, i], rtol=1e-12, atol=1e-15)
    assert fn(0.3, 0.5).shape == (len(ks),)
    # out=: the same numbers written into a given array (kept across calls by the mean-field flow), flat and rows
    out = np.full((len(ks), b.size), np.nan)
    assert fn(b, s, out=out) is out and np.array_equal(out, flat)
    out_rows = np.full((len(ks), 2, b.size), np.nan)
    assert fn(np.tile(b, (2, 1)), s[:2, None], out=out_rows) is out_rows and np.array_equal(out_rows, rows)
    with pytest.raises(ValueError, match="out must be a C-contiguous float64 array of shape"):
        fn(b, s, out=np.empty((len(ks), b.size + 1)))
    with np.errstate(all="ignore"):   # s = 0: inf/nan as NumPy gives them, never an exception
        assert fn(np.array([0.3, -0.2]), np.zeros(2)).shape == (len(ks), 2)


def test_fused_means_need_a_closed_form() -> None:
    with pytest.raises(ActivationError, match="no closed-form mean"):
        ACTIVATIONS["tanh"].means_numpy((0, 1))


def test_mean_numpy_broadcasting_and_mixed_scales() -> None:
    """Arrays mixing small and large s (different panel counts) agree with element-by-element calls."""
    fn = ACTIVATIONS["tanh"].mean_numpy(2)
    b = np.linspace(-2, 2, 6).reshape(2, 3)
    s = np.array([0.2, 1.0, 7.5])
    grid = fn(b, s)
    assert grid.shape == (2, 3) and np.shape(fn(0.1, 1.0)) == ()
    for i in range(2):
        for j in range(3):
            assert grid[i, j] == pytest.approx(float(fn(b[i, j], s[j])), rel=1e-13, abs=1e-15)
    relu = ACTIVATIONS["relu"].mean_numpy(1)  # m_1 = Φ(b/s), absolute accuracy (1 + erf cancels in the tail)
    np.testing.assert_allclose(relu(b, s), [[float(mpmath.ncdf(bb / ss)) for bb, ss in zip(row, s)] for row in b],
                               rtol=1e-13, atol=1e-16)


# ------------------------------------------------------------------------------------------------------------------
# torch and NumPy functions
# ------------------------------------------------------------------------------------------------------------------
GRID = np.concatenate([np.linspace(-30, 30, 121), [-1e-3, 1e-3, 0.37, -2.2]])
# float64 evaluation of σ and σ' is accurate relative to the O(1) scale of the function: in the tails 1 − tanh²,
# σ(1 − σ) and 1 + erf lose relative (not absolute) accuracy, hence the absolute part ~ 1e-15 (1 + |u|)
ATOL = 1e-15 * (1 + np.abs(GRID))


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_numpy_and_torch_functions(name: str) -> None:
    sigma, kinks, dsigma = ORACLES[name]
    act = ACTIVATIONS[name]
    ref = np.array([float(sigma(mpf(x))) for x in GRID])
    got_np = np.asarray(act.numpy()(GRID)) * np.ones_like(GRID)
    assert np.all(np.abs(got_np - ref) <= 1e-13 * np.abs(ref) + ATOL), name
    x = torch.tensor(GRID, dtype=torch.float64, requires_grad=True)
    y = act.torch()(x)
    assert y.shape == x.shape and y.dtype == torch.float64
    assert np.all(np.abs(y.detach().numpy() - ref) <= 1e-13 * np.abs(ref) + ATOL), name
    (grad,) = torch.autograd.grad(y.sum(), x)
    away = np.array([all(abs(x0 - c) > 1e-9 for c in kinks) for x0 in GRID])
    dref = np.array([float(dsigma(mpf(x0))) for x0 in GRID])
    assert np.all((np.abs(grad.numpy() - dref) <= 1e-12 * np.abs(dref) + ATOL)[away]), name


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_torch_float32_extremes_finite(name: str) -> None:
    """float32 at |u| = 100 (exp overflows): finite values equal to float64 ones and finite gradients."""
    x = torch.tensor([-100.0, -20.0, -1.0, 0.5, 20.0, 100.0], requires_grad=True)
    y = ACTIVATIONS[name].torch()(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert y.dtype == torch.float32 and torch.isfinite(y).all() and torch.isfinite(grad).all()
    ref = np.array([float(ORACLES[name][0](mpf(float(v)))) for v in x.detach()])
    np.testing.assert_allclose(y.detach().numpy(), ref.astype(np.float32), rtol=1e-6, atol=1e-30)


# ------------------------------------------------------------------------------------------------------------------
# user expressions
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, sigma, kinks", [
    ("u**3 - 2*u", lambda u: u**3 - 2 * u, ()),
    ("u*tanh(u)", lambda u: u * mpmath.tanh(u), ()),
    ("Abs(u - 1)", lambda u: abs(u - 1), (1,)),
    ("Max(u, 2*u - 1/2)", lambda u: max(u, 2 * u - mpf(1) / 2), (mpf(1) / 2,)),
])
def test_user_expression(text: str, sigma: Callable, kinks: tuple) -> None:
    act = from_expression(text)
    assert act.is_exact == (text == "u**3 - 2*u")
    b, s = -0.4, 0.8
    ref = [m / mpmath.sqrt(mpmath.factorial(n)) for n, m in enumerate(oracle_moments(sigma, kinks, b, s, 4))]
    scale = max(abs(r) for r in ref)
    for n in range(5):
        assert_close(act.hermite(n, b, s).value, ref[n], scale, what=f"{text} μ_{n}")
    for k in range(3):
        expected = ref[k] * mpmath.sqrt(mpmath.factorial(k)) / mpf(s) ** k
        assert abs(act.mean_numpy(k)(b, s) - expected) <= 1e-10 * max(1, abs(expected)), (text, k)


# ------------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------------
def test_unknown_activation_lists_known_ones() -> None:
    with pytest.raises(ActivationError) as info:
        get_activation("swishy")
    msg = str(info.value)
    assert "'swishy'" in msg and all(name in msg for name in ORACLES)
    with pytest.raises(ActivationError, match="undefined symbols: y"):
        get_activation("u*y")


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_degree_names_value(bad) -> None:
    relu = ACTIVATIONS["relu"]
    for call in (lambda: relu.hermite(bad), lambda: relu.mean(bad), lambda: relu.mean_numpy(bad),
                 lambda: ACTIVATIONS["tanh"].hermite(bad, 0.1, 1.0)):
        with pytest.raises(ActivationError, match=re.escape(f"got {bad!r}")):
            call()


def test_bad_bias_or_scale_names_value() -> None:
    with pytest.raises(ActivationError, match=re.escape("s = -1.0")):
        ACTIVATIONS["relu"].hermite(1, 0.0, -1.0)
    with pytest.raises(ActivationError, match="b = nan"):
        ACTIVATIONS["tanh"].mean(0, float("nan"), 1.0)


def test_derivative_mean_beyond_classical_order_at_zero_scale() -> None:
    with pytest.raises(ActivationError, match=r"m_2\(b, s\) at s = 0.*'relu'|'relu'.*m_2\(b, s\) at s = 0"):
        ACTIVATIONS["relu"].mean(2, 0.3, 0.0)


def test_quadrature_beyond_precision_is_refused() -> None:
    """floor has a jump at every integer: tanh-sinh cannot reach 30 digits, and says so for which coefficient."""
    with pytest.raises(ActivationError, match=re.escape("μ_2(b=0.3, s=1.0)") + ".*1e-30"):
        from_expression("floor(u)").hermite(2, 0.3, 1.0)


def test_math_consistency_of_scale_convention() -> None:
    """μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]: for the linear activation μ_0 = b, μ_1 = s, μ_n = 0 beyond."""
    lin = ACTIVATIONS["linear"]
    assert [lin.hermite(n, 0.25, 1.5).value for n in range(4)] == [0.25, 1.5, 0.0, 0.0]
    quad = ACTIVATIONS["quadratic"]  # (s ξ + b)² = b² + s² + 2bs h_1 + sqrt2 s² h_2
    assert [quad.hermite(n, 0.25, 1.5).value for n in range(4)] == pytest.approx(
        [0.0625 + 2.25, 0.75, math.sqrt(2) * 2.25, 0.0], abs=1e-15)


# ------------------------------------------------------------------------------------------------------------------
# activations whose Gaussian means do not exist (issue 11)
# ------------------------------------------------------------------------------------------------------------------
REFUSED = [("1/u", "singularity at u = 0"), ("1/(u-1)", "singularity at u = 1"), ("tan(u)", "singularity at u = "),
           ("log(u)", "not real"), ("sqrt(u)", "not real"), ("u**-2", "singularity at u = 0"),
           ("exp(u**2)", "grows like exp"), ("exp(u**3)", "grows like exp"), ("exp(u**2/100)", "grows like exp"),
           ("exp(-u**2)/u", "singularity at u = 0"), ("log(u**2)", "singularity at u = 0")]


@pytest.mark.parametrize("text, why", REFUSED)
def test_activation_without_gaussian_means_is_refused(text: str, why: str) -> None:
    with pytest.raises(ActivationError, match=re.escape(why)) as info:
        get_activation(text)
    msg = str(info.value)
    assert "\n" not in msg and "do not exist" in msg


def test_refusal_reaches_config_and_every_command(capsys) -> None:
    """The config loader (every command reads the activation through it) and ``featureode hermite`` give one
    line, not a traceback or a number."""
    from featureode.cli import main
    from featureode.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=r"\[network\] activation: .*singularity at u = 0"):
        config_from_dict({"network": {"activation": "1/u"}, "target": {"expr": "z0"}})
    assert main(["hermite", "log(u)", "--max-degree", "3"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("featureode: error: activation 'log(u)'")


@pytest.mark.parametrize("text", ["sin(u)/u", "atan(1/u)", "floor(u)", "exp(u)*sin(u)", "u**10", "cosh(u)",
                                  "exp(Abs(u)**(3/2))", "sqrt(1 + u**2)", "exp(-1/u**2)"])
def test_activations_with_gaussian_means_are_accepted(text: str) -> None:
    """Removable singularities, bounded jumps, exponential and sub-Gaussian growth: the means exist."""
    assert get_activation(text).expr.has(sp.Symbol("u", real=True))


# random expressions: a finite, real, sub-Gaussian part, optionally with one term that breaks existence
_ATOMS = st.sampled_from(["u", "tanh(u)", "erf(u)", "sin(u)", "atan(u)", "exp(-u**2)", "Abs(u)", "u**3",
                          "log(1 + exp(u))", "1/(1 + u**2)", "cosh(u/3)"])
_VALID = st.recursive(_ATOMS, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda t: f"({t[0]}) + ({t[1]})"),
    st.tuples(inner, inner).map(lambda t: f"({t[0]}) * ({t[1]})"),
    st.tuples(st.integers(-3, 3).filter(bool), inner).map(lambda t: f"{t[0]} * ({t[1]})")), max_leaves=3)
_BREAKER = st.tuples(st.sampled_from(["1/(u - {c})", "log(u - {c})", "sqrt(u - {c})", "exp({k}*u**2)",
                                      "(u - {c})**(-2)", "exp(u**3)"]),
                     st.sampled_from(["0", "1", "-2", "1/2"]), st.sampled_from(["1", "1/5", "3"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_VALID)
def test_random_valid_expressions_are_accepted_and_finite(text: str) -> None:
    # the generator can cancel to a constant, e.g. (u) + (-1 * (u)): not an activation, and refused as such
    assume(sp.sympify(text).has(sp.Symbol("u")))
    act = get_activation(text)
    for k in range(3):
        vals = act.mean_numpy(k)(np.array([-0.5, 0.0, 0.7]), np.array([0.3, 1.0, 2.5]))
        assert np.all(np.isfinite(vals)), (text, k, vals)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_VALID, _BREAKER)
def test_random_invalid_expressions_are_refused(text: str, breaker: tuple) -> None:
    form, c, k = breaker
    bad = f"({text}) + " + form.format(c=c, k=k)
    with pytest.raises(ActivationError, match="do not exist"):
        get_activation(bad)


# ------------------------------------------------------------------------------------------------------------------
# high degree: the Taylor recurrences of mean_series
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [50, 101, 200])
def test_relu_high_degree_against_design_closed_form(n: int) -> None:
    """theory §2: ReLU (b = 0, s = 1) E[σ He_n] = 0 for odd n ≥ 3 and (−1)^{n/2−1}(n−3)!!/sqrt(2π) for even n,
    exactly (SymPy equality of the exact coefficient)."""
    mu = ACTIVATIONS["relu"].hermite(n)
    want = 0 if n % 2 else (-1) ** (n // 2 - 1) * sp.factorial2(n - 3) / sp.sqrt(2 * sp.pi) / sp.sqrt(
        sp.factorial(n))
    assert sp.simplify(mu.exact - want) == 0


def _mp_hermite_moment(sigma: Callable, n: int, b: float, s: float, dps: int) -> mpmath.mpf:
    """``E[σ(s ξ + b) h_n(ξ)]`` by mpmath tanh-sinh at ``dps`` digits, He_n from mpmath's physicists' H_n."""
    with mpmath.workdps(dps):
        b, s = mpf(b), mpf(s)
        he = lambda x: mpmath.hermite(n, x / mpmath.sqrt(2)) / mpf(2) ** (mpf(n) / 2)  # noqa: E731
        cut = -b / s
        val = mpmath.quad(lambda x: sigma(s * x + b) * he(x) * mpmath.npdf(x), [-mpmath.inf, cut, 0, mpmath.inf],
                          maxdegree=12)
        return val / mpmath.sqrt(mpmath.factorial(n))


@pytest.mark.parametrize("name, n", [("gelu", 12), ("gelu", 30), ("erf", 25), ("relu", 40), ("step", 33)])
def test_high_degree_against_mpmath_quadrature(name: str, n: int) -> None:
    """μ_n(b, s) at b = 0.3, s = 1.5 from the recurrences against mpmath quadrature of the independent σ."""
    mu = ACTIVATIONS[name].hermite(n, 0.3, 1.5).value
    ref = _mp_hermite_moment(ORACLES[name][0], n, 0.3, 1.5, 60)
    assert abs(mu - float(ref)) <= 1e-12 * max(abs(float(ref)), 1e-3), (name, n, mu, float(ref))


@pytest.mark.parametrize("name", sorted(EXACT))
def test_point_recurrence_equals_symbolic_differentiation(name: str) -> None:
    """Two derivations of m_k at a point: the Taylor recurrences and repeated SymPy differentiation, exactly."""
    act = ACTIVATIONS[name]
    got = act.point_mean_exprs(-0.7, 0.5, 6)
    for k in range(7):
        want = act.mean_expr(k).subs({B: sp.Rational(-7, 10), S: sp.Rational(1, 2)})
        assert abs(sp.N(got[k] - want, 40)) < 1e-35, (name, k)


@pytest.mark.parametrize("name", ["tanh", "silu", "abs"])
def test_hermite_all_matches_oracle_and_single_quadrature(name: str) -> None:
    """The one-pass many-degree path (composite Gauss–Legendre, h_n by recurrence) against the oracle at low
    degree and against the per-coefficient tanh-sinh quadrature at degree 15 (tanh, silu; abs is exact)."""
    b, s = 0.375, 1.25
    act = ACTIVATIONS[name]
    got = act.hermite_all(15, b, s)
    ref = oracle_mu(name, b, s)
    scale = max(abs(r) for r in ref)
    for n in range(NMAX + 1):
        assert_close(got[n].value, ref[n], scale, what=f"{name} μ_{n}")
    assert got[15].value == pytest.approx(act.hermite(15, b, s).value, rel=1e-13, abs=1e-16)


@pytest.mark.parametrize("name", ["relu", "erf", "gelu", "step"])
def test_closed_mean_from_disk_cache_is_lambdify_without_derivation(name, tmp_path, monkeypatch):
    """The NumPy m_k read back from the disk cache equals SymPy's lambdify of the simplified m_k bit for bit, and a
    cache hit (a new process: a new Activation object) does no symbolic derivation at all."""
    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(3)
    b, s = rng.normal(size=200), rng.uniform(0.05, 4.0, size=200)
    act = get_activation(name)
    fresh = dataclasses.replace(act, _derived=type(act._derived)())
    for k in range(4):
        want = np.asarray(sp.lambdify((B, S), act.mean_expr(k), modules=["scipy", "numpy"])(b, s), float)
        got = fresh.mean_numpy(k)(b, s)
        assert np.array_equal(np.broadcast_to(want, b.shape), got)
    assert len(list(tmp_path.glob("mean_*.py"))) == 4
    hit = dataclasses.replace(act, _derived=type(act._derived)())
    monkeypatch.setattr(type(hit), "mean_expr", lambda self, k: pytest.fail("a cache hit derived m_k again"))
    assert np.array_equal(hit.mean_numpy(3)(b, s), fresh.mean_numpy(3)(b, s))


@pytest.mark.parametrize("name", ["softplus", "silu"])
def test_high_derivatives_are_finite_at_large_arguments(name: str) -> None:
    """The derivatives of softplus and silu pair ``logistic(−u)^n`` with ``e^{nu}`` (``inf · 0`` in floating point
    at large ``|u|``); their NumPy forms stay finite there and equal mpmath's derivative of the oracle's σ, and so
    do the derivative means at a large scale ``s`` (``m_k = E[σ(b + sξ) He_k(ξ)]/s^k`` by tanh-sinh)."""
    from featureode.calculus.activation_calculus import U
    from featureode.calculus.numerics import _numpy_namespace, _stable

    act = ACTIVATIONS[name]
    sigma = ORACLES[name][0]
    u = np.array([-300.0, -40.0, -0.5, 0.7, 40.0, 300.0])
    for k in range(1, 8):
        f = sp.lambdify(U, _stable(act.derivative_expr(k)), modules=[_numpy_namespace(), "scipy", "numpy"])
        with np.errstate(over="raise", invalid="raise", under="ignore"):
            got = f(u)
        with mpmath.workdps(30):
            want = [float(mpmath.diff(sigma, mpf(x), k)) for x in u]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * max(1.0, max(map(abs, want))))
    b, s = 0.3, 12.0
    for k in (5, 7):
        got = act.mean_numpy(k)(np.array([b]), np.array([s]))[0]
        with mpmath.workdps(20):
            def he(x: mpmath.mpf, n: int = k) -> mpmath.mpf:
                h0, h1 = mpf(1), x
                for j in range(1, n):
                    h0, h1 = h1, x * h1 - j * h0
                return h1
            c = -mpf(b) / s
            pts = sorted({mpf(0)} | {c + j / mpf(s) for j in range(-4, 5)})
            ref = mpmath.quad(lambda x: sigma(s * x + b) * he(x) * mpmath.npdf(x), [-mpmath.inf, *pts, mpmath.inf])
            ref = ref / mpf(s) ** k
        # the package's double-precision composite rule is 5.6e-8 off at k = 7 here (two mpmath forms agree to 1e-16)
        assert np.isfinite(got) and abs(got - ref) <= 1e-6 * abs(ref), (k, got, float(ref))
