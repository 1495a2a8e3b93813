"""Hermite algebra (theory §1) against independent oracles.

Oracles: Rodrigues' formula ``He_n(z) = (-1)^n e^{z²/2} dⁿ/dzⁿ e^{-z²/2}`` (not SymPy's ``hermite_prob``), exact
Gaussian moments from SymPy integration against ``e^{-z²/2}/sqrt(2π)``, direct polynomial expansion, mpmath's
physicists' Hermite polynomials ``He_n(z) = 2^{-n/2} H_n(z/sqrt 2)``, and autograd.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given
from hypothesis import strategies as st

from featureode.calculus.hermite import (Mode, ModeError, hermite_derivative, hermite_eval, hermite_expr, hermite_to_polynomial,
                                hermite_values, monomial_to_hermite, polynomial_to_hermite, product,
                                product_coefficients)

z = sp.Symbol("z", real=True)
ZS = sp.symbols("z0:4", real=True)
SQ2 = sp.sqrt(2)


@lru_cache(maxsize=None)
def rodrigues(n: int) -> sp.Expr:
    """Orthonormal ``h_n = He_n/sqrt(n!)`` from Rodrigues' formula (independent of the package)."""
    w = sp.exp(-z**2 / 2)
    return sp.expand(sp.simplify((-1) ** n * sp.diff(w, z, n) / w) / sp.sqrt(sp.factorial(n)))


@lru_cache(maxsize=None)
def gaussian_moment(k: int) -> sp.Expr:
    """``E[ξ^k]``, ξ ~ N(0, 1), by exact SymPy integration."""
    return sp.integrate(z**k * sp.exp(-z**2 / 2), (z, -sp.oo, sp.oo)) / sp.sqrt(2 * sp.pi)


def gaussian_mean(poly: sp.Expr, symbols: "tuple[sp.Symbol, ...]") -> sp.Expr:
    """``E[p(ξ)]`` for independent standard normal ξ_i: each monomial replaced by its product of exact moments."""
    p = sp.Poly(sp.expand(poly), *symbols)
    terms = (c * sp.Mul(*[gaussian_moment(k) for k in powers]) for powers, c in p.terms())
    return sp.expand(sum(terms, sp.Integer(0)))


def h_of(mode_dict: dict[int, int]) -> sp.Expr:
    """``h_α(z) = Π h_{α_i}(z_i)`` from Rodrigues' formula."""
    return sp.Mul(*[rodrigues(n).subs(z, ZS[i]) for i, n in mode_dict.items()])


# ------------------------------------------------------------------------------------------------------------------
# univariate polynomials
# ------------------------------------------------------------------------------------------------------------------
def test_gaussian_moment_oracle_matches_double_factorial() -> None:
    assert [gaussian_moment(k) for k in range(7)] == [1, 0, 1, 0, 3, 0, 15]


@pytest.mark.parametrize("n", range(13))
def test_hermite_expr_equals_rodrigues(n: int) -> None:
    assert sp.expand(hermite_expr(n) - rodrigues(n)) == 0


def test_hand_values() -> None:
    """From He_2 = z² − 1, He_3 = z³ − 3z, He_4 = z⁴ − 6z² + 3."""
    assert sp.expand(hermite_expr(2) - (z**2 - 1) / sp.sqrt(2)) == 0
    assert sp.expand(hermite_expr(3) - (z**3 - 3 * z) / sp.sqrt(6)) == 0
    assert sp.expand(hermite_expr(4) - (z**4 - 6 * z**2 + 3) / sp.sqrt(24)) == 0


def test_orthonormality_by_exact_integration() -> None:
    """``∫ h_m h_n e^{-z²/2} dz / sqrt(2π) = δ_mn``: the product expanded in monomials, each integrated exactly."""
    nmax = 10
    for m in range(nmax + 1):
        for n in range(m, nmax + 1):
            assert gaussian_mean(hermite_expr(m) * hermite_expr(n), (z,)) == (1 if m == n else 0), (m, n)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 12, 25])
def test_numeric_values_against_mpmath(n: int) -> None:
    pts = np.linspace(-7.0, 7.0, 29)
    got = hermite_eval(n, pts)
    with mpmath.workdps(40):
        ref = [float(mpmath.hermite(n, x / mpmath.sqrt(2)) / mpmath.sqrt(2**n * mpmath.factorial(n))) for x in pts]
    # the recurrence is stable: error of a few ulps of the envelope max(1, |h_n|)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_hermite_values_list_numpy_and_torch_agree() -> None:
    pts = np.linspace(-4, 4, 17)
    vals_np = hermite_values(pts, 9)
    vals_t = hermite_values(torch.tensor(pts, dtype=torch.float64), 9)
    assert len(vals_np) == len(vals_t) == 10
    for n, (a, t) in enumerate(zip(vals_np, vals_t)):
        ref = [float(rodrigues(n).subs(z, sp.Rational(x).limit_denominator(1000))) for x in pts]
        np.testing.assert_allclose(a, ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(t.numpy(), a, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("n", range(9))
def test_derivative_rule_symbolic_and_autograd(n: int) -> None:
    c, k = hermite_derivative(n)
    lhs = sp.diff(rodrigues(n), z)
    rhs = c * rodrigues(k) if n > 0 else sp.Integer(0)
    assert sp.expand(lhs - rhs) == 0
    x = torch.linspace(-3, 3, 13, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(hermite_eval(n, x).sum(), x)
    expected = math.sqrt(n) * hermite_eval(n - 1, x.detach()) if n > 0 else torch.zeros_like(grad)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)


def test_derivative_of_constant() -> None:
    assert hermite_derivative(0) == (0, 0)


@given(st.integers(0, 9), st.integers(0, 9))
def test_product_linearisation_exact(m: int, n: int) -> None:
    coeffs = product_coefficients(m, n)
    lhs = sp.expand(rodrigues(m) * rodrigues(n))
    rhs = sp.expand(sum(c * rodrigues(k) for k, c in coeffs.items()))
    assert sp.expand(lhs - rhs) == 0
    assert set(coeffs) == {m + n - 2 * j for j in range(min(m, n) + 1)}  # parity and range of the support


@given(st.integers(0, 6), st.integers(0, 6), st.integers(0, 12))
def test_product_coefficient_is_gaussian_triple_integral(m: int, n: int, k: int) -> None:
    """``C(m, n, k) = E[h_m h_n h_k]`` (orthonormality), computed by exact Gaussian moments."""
    expected = gaussian_mean(rodrigues(m) * rodrigues(n) * rodrigues(k), (z,))
    assert sp.simplify(product_coefficients(m, n).get(k, 0) - expected) == 0


@pytest.mark.parametrize("p", range(11))
def test_monomial_to_hermite_round_trip_and_projection(p: int) -> None:
    coeffs = monomial_to_hermite(p)
    assert sp.expand(sum(c * rodrigues(k) for k, c in coeffs.items()) - z**p) == 0
    for k in range(p + 3):  # coefficient = E[z^p h_k] (zero beyond p and for the wrong parity)
        assert sp.simplify(coeffs.get(k, 0) - gaussian_mean(z**p * rodrigues(k), (z,))) == 0


def test_monomial_hand_cases() -> None:
    """z² = 1 + sqrt2 h2; z³ = 3 h1 + sqrt6 h3; z⁴ = 3 + 6 sqrt2 h2 + sqrt24 h4 (from He_2, He_3, He_4)."""
    assert monomial_to_hermite(2) == {0: 1, 2: sp.sqrt(2)}
    assert monomial_to_hermite(3) == {1: 3, 3: sp.sqrt(6)}
    assert monomial_to_hermite(4) == {0: 3, 2: 6 * sp.sqrt(2), 4: 2 * sp.sqrt(6)}


# ------------------------------------------------------------------------------------------------------------------
# multi-indices
# ------------------------------------------------------------------------------------------------------------------
mode_dicts = st.dictionaries(st.integers(0, 40), st.integers(1, 6), max_size=4)
small_modes = st.dictionaries(st.integers(0, 2), st.integers(1, 3), max_size=3)


@given(mode_dicts)
def test_mode_print_parse_round_trip(index: dict[int, int]) -> None:
    mode = Mode.from_dict(index)
    text = str(mode)
    assert Mode.parse(text) == mode
    assert mode.as_dict() == index
    assert hash(Mode.parse(text)) == hash(mode)


@given(mode_dicts, st.randoms(use_true_random=False), st.sampled_from(["", " "]))
def test_mode_parse_of_generated_text(index: dict[int, int], rnd, pad: str) -> None:
    """Text written independently (random factor order, h1(z_i) or z_i, optional spaces) parses to the index."""
    factors = [(f"z{i}" if rnd.random() < 0.5 else f"h1({pad}z{i})") if n == 1 else f"h{n}(z{i})"
               for i, n in index.items()]
    rnd.shuffle(factors)
    text = f"{pad}*{pad}".join(factors) if factors else "1"
    mode = Mode.parse(text)
    assert mode.as_dict() == index
    assert mode.degree == sum(index.values())
    assert mode.factorial == math.prod(math.factorial(n) for n in index.values())


def test_mode_text_examples() -> None:
    assert str(Mode.parse("1")) == "1" and Mode.parse("1").degree == 0
    assert Mode.parse("z0*z1").as_dict() == {0: 1, 1: 1}
    assert Mode.parse("h2(z0)*z3").as_dict() == {0: 2, 3: 1}
    assert str(Mode.from_dense((2, 0, 0, 1))) == "h2(z0)*z3"
    assert Mode.from_dense((0, 0)) == Mode() and str(Mode()) == "1"


def test_mode_properties() -> None:
    m = Mode.parse("h3(z1)*z4")
    assert m.degree == 4 and m.support == (1, 4) and m.order(1) == 3 and m.order(0) == 0
    assert m.factorial == 6 and m.parity == 0
    assert m.dense(5) == (0, 3, 0, 0, 1)
    g = [sp.Rational(1, k + 2) for k in range(5)]
    assert m.g_power(g) == sp.Rational(1, 3) ** 3 * sp.Rational(1, 6)
    assert m.shift(1, -3) == Mode.parse("z4") and m.shift(0, -1) is None and m.shift(0, 2) == Mode.parse(
        "h2(z0)*h3(z1)*z4")


def test_mode_order_by_degree() -> None:
    modes = [Mode.parse(t) for t in ["h2(z0)*z3", "z1", "1", "z0*z1*z2", "z0", "h2(z0)"]]
    degrees = [m.degree for m in sorted(modes)]
    assert degrees == sorted(degrees) == [0, 1, 1, 2, 3, 3]
    assert sorted(modes)[0] == Mode() and len(set(modes + [Mode.parse("z1")])) == 6


@given(small_modes, small_modes)
def test_multivariate_product_exact(a: dict[int, int], b: dict[int, int]) -> None:
    terms = product(Mode.from_dict(a), Mode.from_dict(b))
    lhs = sp.expand(h_of(a) * h_of(b))
    rhs = sp.expand(sum(c * h_of(m.as_dict()) for m, c in terms.items()))
    assert sp.expand(lhs - rhs) == 0


@given(small_modes)
def test_mode_sympy_and_evaluate(index: dict[int, int]) -> None:
    mode = Mode.from_dict(index)
    assert sp.expand(mode.sympy(ZS) - h_of(index)) == 0
    pts = np.random.default_rng(len(index)).normal(size=(6, 3))
    f = sp.lambdify(ZS[:3], h_of(index), "numpy")
    np.testing.assert_allclose(mode.evaluate(pts), f(*pts.T) * np.ones(6), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mode.evaluate(torch.tensor(pts)).numpy(), f(*pts.T) * np.ones(6), rtol=1e-12,
                               atol=1e-12)


# ------------------------------------------------------------------------------------------------------------------
# polynomial <-> Hermite
# ------------------------------------------------------------------------------------------------------------------
monomials = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))
rationals = st.fractions(min_value=-5, max_value=5, max_denominator=7)


@given(st.dictionaries(monomials, rationals, min_size=1, max_size=5))
def test_polynomial_hermite_round_trip_and_projection(terms: dict) -> None:
    zs = list(ZS[:3])
    poly = sum((sp.Rational(c.numerator, c.denominator) * zs[0]**i * zs[1]**j * zs[2]**k
                for (i, j, k), c in terms.items()), sp.Integer(0))
    coeffs = polynomial_to_hermite(poly, zs)
    assert sp.expand(hermite_to_polynomial(coeffs, zs) - poly) == 0
    for mode, c in coeffs.items():
        assert c != 0
        # each coefficient is the Gaussian projection E[p h_α]
        assert sp.simplify(c - gaussian_mean(poly * h_of(mode.as_dict()), tuple(zs))) == 0


def test_polynomial_hand_cases() -> None:
    zs = list(ZS[:2])
    z0, z1 = zs
    # z0 z1² = z0 (1 + sqrt2 h2(z1))
    assert polynomial_to_hermite(z0 * z1**2, zs) == {Mode.parse("z0"): 1, Mode.parse("z0*h2(z1)"): sp.sqrt(2)}
    # z0² − 1 = sqrt2 h2(z0): the constant cancels exactly and is dropped
    assert polynomial_to_hermite(z0**2 - 1, zs) == {Mode.parse("h2(z0)"): sp.sqrt(2)}
    # (z0 + z1)² = 2 + sqrt2 h2(z0) + sqrt2 h2(z1) + 2 z0 z1
    assert polynomial_to_hermite((z0 + z1) ** 2, zs) == {Mode(): 2, Mode.parse("h2(z0)"): sp.sqrt(2),
                                                         Mode.parse("h2(z1)"): sp.sqrt(2), Mode.parse("z0*z1"): 2}
    assert polynomial_to_hermite(sp.Integer(0), zs) == {}
    # sqrt(3 + 2 sqrt2) = 1 + sqrt2: a cancellation that expansion alone does not see
    assert polynomial_to_hermite(sp.sqrt(3 + 2 * SQ2) * z0 - (1 + SQ2) * z0 + z1, zs) == {Mode.parse("z1"): 1}


def test_polynomial_hermite_monte_carlo() -> None:
    """Random polynomial: v_α vs the Monte Carlo projection E[p h_α], within 5 standard errors."""
    rng = np.random.default_rng(1)
    zs = list(ZS[:3])
    poly = sum((sp.Rational(int(rng.integers(-9, 10)), 4) * zs[0]**int(rng.integers(0, 3))
                * zs[1]**int(rng.integers(0, 3)) * zs[2]**int(rng.integers(0, 2)) for _ in range(6)), sp.Integer(0))
    coeffs = polynomial_to_hermite(poly, zs)
    samples = rng.standard_normal((200_000, 3))
    p_vals = sp.lambdify(zs, poly, "numpy")(*samples.T) * np.ones(len(samples))
    for mode in [Mode.from_dense((i, j, k)) for i in range(4) for j in range(4) for k in range(3)]:
        prod = p_vals * mode.evaluate(samples)
        se = prod.std() / math.sqrt(len(prod))
        assert abs(prod.mean() - float(coeffs.get(mode, 0))) < 5 * se + 1e-12, mode


# ------------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_order_names_value(bad) -> None:
    with pytest.raises(ModeError, match=re.escape(repr(bad))):
        hermite_expr(bad)
    with pytest.raises(ModeError, match="non-negative integer"):
        hermite_values(np.zeros(2), bad)


@pytest.mark.parametrize("text, where", [("z0*z0", "repeats dimension z0"), ("h0(z1)", "h0(z1)"),
                                         ("z0*", "factor '' at character 3"), ("1*z0", "factor '1'"),
                                         ("y0", "factor 'y0'"), ("h-1(z0)", "h-1")])
def test_bad_mode_text(text: str, where: str) -> None:
    with pytest.raises(ModeError, match=re.escape(where)):
        Mode.parse(text)


def test_bad_mode_construction_and_dimension() -> None:
    with pytest.raises(ModeError, match="-1"):
        Mode.from_dict({0: -1})
    with pytest.raises(ModeError, match="dimension index"):
        Mode.from_dict({-2: 1})
    with pytest.raises(ModeError, match="z5.*d = 4"):
        Mode.parse("z0*z5").dense(4)
