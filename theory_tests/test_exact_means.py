"""Gaussian means of exponential and trigonometric activations against closed forms, up to the divergence
threshold, and refusals beyond it (issue 22, item 1).

References are written here from the Gaussian identities, independently of the code under test:
``E[e^{a(b + sξ)}] = e^{ab + a²s²/2}``, ``E_{ŵ~N(0,g)}[e^{κ|ŵ|²}] = Π_i (1 − 2κ g_i)^{−1/2}`` and, under the tilted
law ``ŵ_i ~ N(0, g_i' = g_i/(1 − 2κ g_i))``, the moments ``E[ŵ_0²] = g_0'``, ``E[ŵ_0² ŵ_i²] = g_0' g_i' + 2δ_{0i} g_0'²``.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from featureode.calculus.activations import ActivationError, get_activation
from featureode.kernel.theory import closure_constants, exact_eigenvalues, level_coefficients

SB = 0.5


def _spectrum(d: int = 8) -> np.ndarray:
    g = np.array([(k + 3.0) ** -1.5 for k in range(d)])
    return g / g.sum()


G = _spectrum()
C_MAX = math.sqrt(1 / (2 * G[0]))      # 2c²g_0 = 1


def _T(kappa: float, g: np.ndarray = G) -> float:
    return float(np.prod((1 - 2 * kappa * g) ** -0.5))


@pytest.mark.parametrize("frac", [0.2, 0.5, 0.8, 0.95, 0.999])
def test_exp_closure_constants_up_to_threshold(frac: float) -> None:
    c = frac * C_MAX
    got = closure_constants(f"exp({c!r}*u)", G, SB, 3)
    # m_l = c^l e^{cb + c²s²/2}: c_l = c^{2l} e^{2c²σ_b²} Π(1 − 2c² g_i)^{−1/2}
    want = np.array([c ** (2 * l) for l in range(4)]) * math.exp(2 * c * c * SB * SB) * _T(c * c)
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_exp_at_issue_point() -> None:
    """exp(u), d = 8, σ_b = 0.5: c_0 = e^{2σ_b²} Π(1 − 2g_i)^{−1/2} = 5.85 (31.6 before)."""
    c0 = closure_constants("exp(u)", G, SB, 0)[0]
    assert c0 == pytest.approx(math.exp(2 * SB**2) * _T(1.0), rel=1e-10)
    assert c0 == pytest.approx(5.850433, rel=1e-6)


@pytest.mark.parametrize("frac", [1.0, 1.01, 1.5])
def test_exp_refused_beyond_threshold(frac: float) -> None:
    c = frac * C_MAX * (1 + 1e-12)
    with pytest.raises(ActivationError, match=r"diverges for 2c²g_0 ≥ 1"):
        closure_constants(f"exp({c!r}*u)", G, SB, 1)
    with pytest.raises(ActivationError, match=r"diverges"):
        exact_eigenvalues(["z0"], G, f"exp({c!r}*u)", SB)


@pytest.mark.parametrize("c", [0.5, 1.0, 1.25])
def test_exp_eigenvalue_closed_form(c: float) -> None:
    """λ_{z0} = K_{z0 z0} for σ = e^{cu}: readout E[ŵ_0² m_1²], bias E[ŵ_0² m_2²], weights
    E[ŵ_0² P m_3²] + 2 g_0 E[ŵ_0² m_1 m_3] + g_0 E[m_1²] (meanfield: E[a²] = 1)."""
    k = c * c
    gp = G / (1 - 2 * k * G)
    pre = math.exp(2 * k * SB * SB) * _T(k)
    e_w0 = gp[0]
    e_w0_p = gp[0] * float(np.sum(G * gp)) + 2 * G[0] * gp[0] ** 2
    want = pre * (c**2 * e_w0 + c**4 * e_w0 + c**6 * e_w0_p + 2 * G[0] * c**4 * e_w0 + G[0] * c**2)
    got, _ = exact_eigenvalues(["z0"], G, f"exp({c!r}*u)", SB)
    assert got[0] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("omega", [1.0, 10.0, 100.0])
def test_sin_closure_constants(omega: float) -> None:
    """sin(ωu): m_0 = sin(ωb) e^{−ω²s²/2}, m_1 = ω cos(ωb) e^{−ω²s²/2}; E_b[sin²(ωb)] = (1 − e^{−2ω²σ_b²})/2."""
    got = closure_constants(f"sin({omega!r}*u)", G, SB, 1)
    damp = math.exp(-2 * omega**2 * SB**2)
    T = _T(-omega**2)
    want = [(1 - damp) / 2 * T, omega**2 * (1 + damp) / 2 * T]
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_cosh_and_u_exp_closed_forms() -> None:
    got = closure_constants("cosh(u)", G, SB, 0)[0]
    # cosh(cb)² e^{c²Q} averaged: (e^{2c²σ_b²} + 1)/2 · Π(1 − 2c²g_i)^{−1/2}
    assert got == pytest.approx((math.exp(2 * SB**2) + 1) / 2 * _T(1.0), rel=1e-9)
    # u e^u: m_0 = (b + Q) e^{b + Q/2}; E_b[(b + Q)² e^{2b}] = e^{2σ²}((2σ² + Q)² + σ²), then Q under the tilted law
    gp = G / (1 - 2 * G)
    m1, m2 = gp.sum(), gp.sum() ** 2 + 2 * (gp**2).sum()
    a = 2 * SB**2
    want = math.exp(2 * SB**2) * _T(1.0) * (a * a + 2 * a * m1 + m2 + SB**2)
    # 3e-9: the Talbot roundoff floor of this tilted law's second moment (≈ 1.5e-9 at step 0.1 and at 0.05 alike)
    assert closure_constants("u*exp(u)", G, SB, 0)[0] == pytest.approx(want, rel=3e-9)


def test_hea_level_coefficients_oscillating() -> None:
    """Λ_l = (l+1) E_b[m_l(b,1)²] + E_b[m_{l+1}(b,1)²] for sin(ωu), closed form in b (Gauss–Hermite in b cannot
    resolve sin(100 b))."""
    om = 100.0
    damp = math.exp(-2 * om**2 * SB**2)
    sq = [om ** (2 * k) * (1 - damp if k % 2 == 0 else 1 + damp) / 2 * math.exp(-om**2) for k in range(4)]
    want = [(l + 1) * sq[l] + sq[l + 1] for l in range(3)]
    got = level_coefficients(f"sin({om!r}*u)", SB, 2)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)


def test_hermite_exact_exponential() -> None:
    """μ_n(b, s) of exp(10u) is s^n 10^n e^{10b + 50 s²}/sqrt(n!), exactly (it was 3–8e-6 off by quadrature)."""
    act = get_activation("exp(10*u)")
    assert act.is_exact
    coeffs = act.hermite_all(6, 0.25, 1.5)
    for n, c in enumerate(coeffs):
        want = mpmath.mpf(1.5) ** n * 10**n * mpmath.exp(10 * 0.25 + 50 * 1.5**2) / mpmath.sqrt(mpmath.factorial(n))
        assert c.value == pytest.approx(float(want), rel=1e-14)


@pytest.mark.parametrize("expr,c", [("exp(4*u)*tanh(u)", 4.0), ("exp(u)*erf(u)", 1.0)])
def test_hermite_quadrature_follows_the_peak(expr: str, c: float) -> None:
    """No closed form: the quadrature window follows the peak of e^{c s ξ} φ(ξ) at ξ = c s (reference: mpmath
    tanh-sinh split at the peak, 40 digits)."""
    act = get_activation(expr)
    assert not act.is_exact and act.exp_rate[1] >= c
    f = act.mpmath_function
    got = act.hermite_all(3, 0.0, 2.0)
    for n in range(4):
        with mpmath.workdps(40):
            he = lambda x: mpmath.hermite(n, x / mpmath.sqrt(2)) * mpmath.mpf(2) ** (-mpmath.mpf(n) / 2)  # noqa: E731
            ref = mpmath.quad(lambda x: f(2 * x) * mpmath.npdf(x) * he(x), [-mpmath.inf, 0, 2 * c, mpmath.inf])
            ref /= mpmath.sqrt(mpmath.factorial(n))
        assert got[n].value == pytest.approx(float(ref), rel=1e-12)
    m = act.mean_numpy(0)(np.array([0.0]), np.array([2.0]))[0]
    with mpmath.workdps(30):
        ref0 = mpmath.quad(lambda x: f(2 * x) * mpmath.npdf(x), [-mpmath.inf, 0, 2 * c, mpmath.inf])
    assert m == pytest.approx(float(ref0), rel=1e-10)


def test_kernel_refuses_uncertified_exponential_growth() -> None:
    with pytest.raises(ActivationError, match="no closed-form Gaussian mean"):
        closure_constants("exp(u)*tanh(u)", G, SB, 0)


def test_montecarlo_refuses_infinite_variance() -> None:
    c = 0.8 * C_MAX     # 2c²g_0 = 0.64 < 1 ≤ 4c²g_0
    with pytest.raises(ActivationError, match="Monte Carlo variance"):
        exact_eigenvalues(["z0"], G, f"exp({c!r}*u)", SB, method="montecarlo", n_neurons=1000)
