"""Target parsing and exact Hermite decomposition (theory §1) against hand derivations and Monte Carlo.

Hand values use He_1 = z, He_2 = z² − 1, He_3 = z³ − 3z (so z² = 1 + sqrt2 h_2, z³ = 3 h_1 + sqrt6 h_3) and
x_i = sqrt(g_i) z_i. Re-expansions use SymPy's ``hermite_prob``, not the package's Hermite code.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given
from hypothesis import strategies as st

from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.calculus.targets import Target, TargetError, parse_target

ZS = sp.symbols("z0:4", real=True)
SQ2, SQ3, SQ6 = sp.sqrt(2), sp.sqrt(3), sp.sqrt(6)


def as_exact(target: Target) -> dict[str, sp.Expr]:
    return {str(m): c for m, c in zip(target.modes, target.exact)}


def expand_modes(target: Target) -> sp.Expr:
    """``Σ_α v_α Π_i He_{α_i}(z_i)/sqrt(α_i!)`` with SymPy's own Hermite polynomials."""
    total = sp.Integer(0)
    for mode, c in zip(target.modes, target.exact):
        total += c * sp.Mul(*[sp.hermite_prob(n, ZS[i]) / sp.sqrt(sp.factorial(n)) for i, n in mode.items])
    return sp.expand(total)


def same(a: sp.Expr, b: sp.Expr) -> bool:
    return sp.simplify(a - b) == 0


# ------------------------------------------------------------------------------------------------------------------
# hand cases
# ------------------------------------------------------------------------------------------------------------------
def test_single_mode() -> None:
    t = parse_target("z0*z1", 3)
    assert as_exact(t) == {"z0*z1": 1} and t.constant == 0 and t.dim == 3


def test_square_with_and_without_normalisation() -> None:
    raw = parse_target("z0^2", 2, normalize=False)  # z² = 1 + sqrt2 h2
    assert as_exact(raw) == {"1": 1, "h2(z0)": SQ2} and raw.constant_exact == 1
    norm = parse_target("z0^2", 2)
    assert as_exact(norm) == {"h2(z0)": 1} and norm.constant_exact == 1  # the constant, reported as written


def test_cube_normalised() -> None:
    """z³ = 3 h1 + sqrt6 h3, variance 9 + 6 = 15."""
    t = parse_target("z0**3", 1)
    expected = {"z0": 3 / sp.sqrt(15), "h3(z0)": SQ6 / sp.sqrt(15)}
    assert set(as_exact(t)) == set(expected)
    assert all(same(as_exact(t)[k], v) for k, v in expected.items())
    assert t.variance == pytest.approx(1.0, abs=1e-15)


def test_staircase() -> None:
    t = parse_target("staircase(3)", 4)
    assert [str(m) for m in t.modes] == ["z0", "z0*z1", "z0*z1*z2"]
    assert all(same(c, 1 / SQ3) for c in t.exact)
    assert as_exact(parse_target("staircase(1)", 1)) == {"z0": 1}


def test_linear_combination_with_decimal_and_hermite_factor() -> None:
    t = parse_target("h2(z0) + 2*z1 - 0.5*z0*z2", 3, normalize=False)
    assert as_exact(t) == {"z1": 2, "h2(z0)": 1, "z0*z2": sp.Rational(-1, 2)}  # 0.5 read as the rational 1/2
    t = parse_target("3*h3(z1) + 4*z2", 3)
    assert as_exact(t) == {"z2": sp.Rational(4, 5), "h3(z1)": sp.Rational(3, 5)}


def test_hermite_factor_equals_its_polynomial() -> None:
    """h3(z0) is (z0³ − 3 z0)/sqrt6 exactly."""
    a = parse_target("h3(z0)*z1", 2, normalize=False)
    b = parse_target("(z0^3 - 3*z0)*z1/sqrt(6)", 2, normalize=False)
    assert a.modes == b.modes and all(same(p, q) for p, q in zip(a.exact, b.exact))


def test_x_coordinates_explicit_rational_spectrum() -> None:
    """g = (1/2, 1/4, 1/4): x0 x1 = sqrt(1/8) z0 z1; x2² = (1/4)(1 + sqrt2 h2(z2))."""
    spec = Spectrum.from_eigenvalues(["1/2", "1/4", "1/4"])
    t = parse_target("x0*x1 + x2^2", spec, normalize=False)
    assert as_exact(t) == {"1": sp.Rational(1, 4), "z0*z1": SQ2 / 4, "h2(z2)": SQ2 / 4}
    t = parse_target("x0*x1 + x2^2", spec)
    assert as_exact(t) == {"z0*z1": SQ2 / 2, "h2(z2)": SQ2 / 2}  # both SQ2/4, norm 1/2
    assert t.constant_exact == sp.Rational(1, 4)


def test_x_coordinates_exact_power_law() -> None:
    """exponent 2, offset 1, d = 3: g = (36, 9, 4)/49, so x0 + x1 = (6/7) z0 + (3/7) z1."""
    spec = Spectrum.power_law(3, exponent=2, offset=1)
    assert as_exact(parse_target("x0 + x1", spec, normalize=False)) == {"z0": sp.Rational(6, 7),
                                                                        "z1": sp.Rational(3, 7)}
    t = parse_target("x0 + x1", spec)
    assert same(t.exact[0], 2 / sp.sqrt(5)) and same(t.exact[1], 1 / sp.sqrt(5))


def test_design_example_x0_squared_plus_staircase() -> None:
    """``x0^2 + staircase(3)`` at d = 8 under the default power law: g0 (1 + sqrt2 h2(z0)) + (z0 + z0z1 + z0z1z2)/sqrt3."""
    spec = Spectrum.power_law(8)
    raw = np.arange(3, 11, dtype=float) ** -1.5
    g0 = raw[0] / raw.sum()
    t = parse_target("x0^2 + staircase(3)", spec)
    norm = math.sqrt(2 * g0**2 + 1)
    expected = {"z0": 1 / math.sqrt(3) / norm, "h2(z0)": math.sqrt(2) * g0 / norm,
                "z0*z1": 1 / math.sqrt(3) / norm, "z0*z1*z2": 1 / math.sqrt(3) / norm}
    got = {str(m): c for m, c in t.as_dict().items()}
    assert set(got) == set(expected)
    assert all(got[k] == pytest.approx(v, rel=1e-13) for k, v in expected.items())
    assert t.constant == pytest.approx(g0, rel=1e-13)


# ------------------------------------------------------------------------------------------------------------------
# round trips and Monte Carlo
# ------------------------------------------------------------------------------------------------------------------
monomials = st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2))
rationals = st.fractions(min_value=-4, max_value=4, max_denominator=5).filter(lambda f: f != 0)


def _text(terms: dict, caret: bool) -> str:
    """Write the polynomial as target text by hand: ``(p/q)*z0^a*z1^b``."""
    parts = []
    for (a, b, c), f in terms.items():
        factors = [f"({f.numerator}/{f.denominator})"] + [
            f"z{i}" + ("" if e == 1 else ("^" if caret else "**") + str(e)) for i, e in enumerate((a, b, c)) if e]
        parts.append("*".join(factors))
    return " + ".join(parts)


@given(st.dictionaries(monomials, rationals, min_size=1, max_size=5), st.booleans())
def test_parse_round_trip_exact(terms: dict, caret: bool) -> None:
    poly = sp.expand(sum((sp.Rational(f.numerator, f.denominator) * ZS[0]**a * ZS[1]**b * ZS[2]**c
                          for (a, b, c), f in terms.items()), sp.Integer(0)))
    t = parse_target(_text(terms, caret), 3, normalize=False)
    assert sp.expand(expand_modes(t) - poly) == 0
    assert list(t.modes) == sorted(t.modes)  # ordered by degree
    if any(m.degree > 0 for m in t.modes):
        n = parse_target(_text(terms, caret), 3)
        assert same(sum((c**2 for c in n.exact), sp.Integer(0)), 1)  # unit variance, exactly
        assert Mode() not in n.modes


def test_random_polynomial_monte_carlo() -> None:
    """Normalised target of a random polynomial: pointwise equal to (p − E p)/sd(p); E f* = 0 and E f*² = 1 within 5
    standard errors of a 200 000-sample Monte Carlo."""
    rng = np.random.default_rng(7)
    terms = {tuple(int(e) for e in rng.integers(0, 3, size=4)): int(rng.integers(-5, 6)) or 1 for _ in range(6)}
    text = " + ".join(f"({c})*" + "*".join([f"z{i}^{e}" for i, e in enumerate(p) if e] or ["1"])
                      for p, c in terms.items())
    t = parse_target(text, 4)
    z = rng.standard_normal((200_000, 4))
    p = sum(c * np.prod(z ** np.array(e), axis=1) for e, c in terms.items())
    f = t.evaluate(z)
    n = len(f)
    assert abs(f.mean()) < 5 * f.std() / math.sqrt(n)
    assert abs((f**2).mean() - 1) < 5 * (f**2).std() / math.sqrt(n)
    # pointwise: p = constant + sd · f*, with sd² = Σ_{α≠0} v_α² of the unnormalised decomposition
    raw = parse_target(text, 4, normalize=False)
    sd = math.sqrt(raw.variance)
    np.testing.assert_allclose(t.constant + sd * f, p, rtol=1e-10, atol=1e-9)


xmonomials = st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2))


@given(st.dictionaries(xmonomials, rationals, min_size=1, max_size=4))
def test_x_coordinates_round_trip_exact(terms: dict) -> None:
    """A polynomial in x under eigenvalues (1/4, 1/9, 1/16), so x_i = z_i/2, z_i/3, z_i/4 exactly: the modes
    re-expanded with SymPy's Hermite polynomials give back the polynomial with x substituted by hand."""
    spec = Spectrum.from_eigenvalues(["1/4", "1/9", "1/16"])
    text = _text(terms, caret=True).replace("z", "x")
    half = [sp.Rational(1, 2), sp.Rational(1, 3), sp.Rational(1, 4)]
    poly = sp.expand(sum((sp.Rational(f.numerator, f.denominator) * (half[0] * ZS[0])**a * (half[1] * ZS[1])**b
                          * (half[2] * ZS[2])**c for (a, b, c), f in terms.items()), sp.Integer(0)))
    t = parse_target(text, spec, normalize=False)
    assert sp.expand(expand_modes(t) - poly) == 0


def test_large_dimension_decomposes_on_the_used_coordinates() -> None:
    """d = 100 000 (the z-symbols of unused coordinates are never built): z0*z1 is one mode, and
    x0*x99999 = sqrt(g_0 g_99999) z0*z99999 with g the normalised power law written out here."""
    d = 100_000
    spec = Spectrum.power_law(d)
    assert as_exact(parse_target("z0*z1", spec)) == {"z0*z1": 1}
    raw = (np.arange(d) + 3.0) ** -1.5
    g = raw / raw.sum()
    t = parse_target("x0*x99999 + x5", spec, normalize=False)
    got = {str(m): c for m, c in t.as_dict().items()}
    assert set(got) == {"z5", "z0*z99999"} and t.dim == d
    assert got["z0*z99999"] == pytest.approx(math.sqrt(g[0] * g[-1]), rel=1e-12)
    assert got["z5"] == pytest.approx(math.sqrt(g[5]), rel=1e-12)
    assert [str(m) for m in parse_target("staircase(3)", spec).modes] == ["z0", "z0*z1", "z0*z1*z2"]


def test_full_covariance_rotation_consistency() -> None:
    """Target written in the user's x: evaluate directly on x ~ N(0, Σ) (Cholesky sampler, independent of the
    package) and through the z-decomposition; they agree pointwise, and the moments match Σ."""
    cov = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
    spec = Spectrum.from_covariance(cov)
    t = parse_target("x0*x1 + 0.5*x2^2 - x1", spec, normalize=False)
    n = 200_000
    x = np.random.default_rng(4).standard_normal((n, 3)) @ np.linalg.cholesky(cov).T
    direct = x[:, 0] * x[:, 1] + 0.5 * x[:, 2] ** 2 - x[:, 1]
    via_z = t.evaluate(spec.to_z(x @ spec.rotation))
    np.testing.assert_allclose(via_z, direct, rtol=1e-10, atol=1e-10)
    # E f = Σ01 + Σ22/2; Var f by Isserlis: Var(x0x1) + Var(x2²/2) + Var(x1) + 2 Cov(x0x1, x2²/2)
    #   = Σ00Σ11 + Σ01² + Σ22²/2 + Σ11 + 2 Σ02Σ12 (the odd covariances with x1 vanish)
    assert t.constant == pytest.approx(cov[0, 1] + 0.5 * cov[2, 2], rel=1e-12)
    var_isserlis = (cov[0, 0] * cov[1, 1] + cov[0, 1] ** 2 + 0.5 * cov[2, 2] ** 2 + cov[1, 1]
                    + 2 * cov[0, 2] * cov[1, 2])
    assert sum(c**2 for m, c in t.as_dict().items() if m.degree) == pytest.approx(var_isserlis, rel=1e-12)
    assert abs(direct.mean() - t.constant) < 5 * direct.std() / math.sqrt(n)
    dev2 = (direct - t.constant) ** 2
    assert abs(dev2.mean() - var_isserlis) < 5 * dev2.std() / math.sqrt(n)


def test_full_covariance_drops_round_off_modes() -> None:
    """|x|² = Σ_i g_i z_i² has no cross terms; float rotation must not leave ~1e-16 modes behind."""
    spec = Spectrum.from_covariance([[2.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    t = parse_target("x0^2 + x1^2 + x2^2", spec, normalize=False)
    assert [str(m) for m in t.modes] == ["1", "h2(z0)", "h2(z1)", "h2(z2)"]
    assert t.constant == pytest.approx(5.0, rel=1e-13)
    np.testing.assert_allclose(t.coefficients[1:], math.sqrt(2) * spec.g, rtol=1e-12)


def test_evaluate_numpy_and_torch() -> None:
    t = parse_target("staircase(3) + 0.3*h2(z3)", 5)
    z = np.random.default_rng(0).standard_normal((64, 5))
    zz = z[:, :4]
    direct = ((zz[:, 0] + zz[:, 0] * zz[:, 1] + zz[:, 0] * zz[:, 1] * zz[:, 2]) / math.sqrt(3)
              + 0.3 * (zz[:, 3] ** 2 - 1) / math.sqrt(2)) / math.sqrt(1 + 0.09)
    np.testing.assert_allclose(t.evaluate(z), direct, rtol=1e-12)
    np.testing.assert_allclose(t.evaluate(torch.tensor(z)).numpy(), direct, rtol=1e-12)


def test_from_modes() -> None:
    t = Target.from_modes({"z0*z1": 3, Mode.parse("h2(z2)"): 4}, dim=3)
    assert as_exact(t) == {"z0*z1": sp.Rational(3, 5), "h2(z2)": sp.Rational(4, 5)}
    with pytest.raises(ValueError, match="z5.*d = 3"):
        Target.from_modes({"z5": 1}, dim=3)


# ------------------------------------------------------------------------------------------------------------------
# bad input: each message names the bad value and, for syntax, where it is
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, d, message", [
    ("z0 +* z1", 3, "at position 4"),
    ("z0 + (z1", 3, "'(' was never closed at position 5"),
    ("2 z0", 3, "at position 2"),
    ("z0^2 +* z1", 3, "at position 6"),  # position in the text as written, with ^
    ("z0 $ z1", 3, "unexpected character '$' at position 3"),
    ("z8", 8, "z8 at position 0 is out of range for d = 8"),
    ("z0 + z12", 8, "z12 at position 5"),
    ("foo(z0)", 3, "unknown name 'foo' at position 0"),
    ("x0", 3, "x-coordinates"),
    ("h2(2*z0)", 3, "h2(2*z0)"),
    ("h2(z0, z1)", 3, "h2(z0, z1)"),
    ("staircase(2.5)", 4, "integer k, got 5/2"),
    ("staircase(9)", 8, "staircase(9) needs 1 ≤ k ≤ d = 8"),
    ("staircase(0)", 8, "staircase(0)"),
    ("sqrt(z0)", 3, "not a polynomial"),
    ("z0^-1", 3, "not a polynomial"),
    ("3", 3, "no non-constant part"),
    ("  ", 3, "non-empty"),
    ("z0, z1", 3, "not a single expression"),
    ("z01*z1", 3, "z01 at position 0 has a leading zero; write z1"),
])
def test_bad_targets(text: str, d: int, message: str) -> None:
    with pytest.raises(TargetError, match=re.escape(message)):
        parse_target(text, d)


def test_evaluate_wrong_dimension() -> None:
    with pytest.raises(TargetError, match="samples have 2 dimensions.*d = 3"):
        parse_target("z0", 3).evaluate(np.zeros((4, 2)))


# --- issue 22 item 2: only ASCII mode names; double range -----------------------------------------------------
@pytest.mark.parametrize("text,char", [("z０ + z1", "０"), ("z０*z0 + z1", "０"), ("z0*z1 + z٣", "٣"),
                                       ("z0 − z1", "−"), ("z1 + α", "α"), ("ｚ0", "ｚ")])
def test_non_ascii_refused_naming_the_character(text, char):
    from featureode.calculus.targets import TargetError, parse_target
    with pytest.raises(TargetError, match=f"character '{char}'") as err:
        parse_target(text, 4)
    assert "\n" not in str(err.value)


def test_ascii_neighbours_still_parse():
    from featureode.calculus.targets import parse_target
    t = parse_target("z0 + z1", 4)
    assert {str(m) for m in t.modes} == {"z0", "z1"}


@pytest.mark.parametrize("text", ["1e400*z0", "1e-200*z0", "1e200*z0*z1"])
def test_unnormalised_target_outside_double_range_refused(text):
    from featureode.calculus.targets import TargetError, parse_target
    with pytest.raises(TargetError, match="double precision"):
        parse_target(text, 4, normalize=False)
    assert parse_target(text, 4, normalize=True).coefficients == pytest.approx([1.0])


# --- issue 19 item 2: the numeric decomposition (no SymPy) against the exact SymPy values ----------------------------
def _sympy_reference(text: str, spectrum, normalize: bool) -> Target:
    """The SymPy decomposition (exact arithmetic), the reference the numeric path is checked against."""
    from featureode.calculus.targets import _parse_exact

    return _parse_exact(text, spectrum, normalize)


def _numeric_only(monkeypatch, text: str, spectrum, normalize: bool) -> Target:
    """``parse_target`` with the SymPy path switched off: it must not be needed."""
    import featureode.calculus.targets as targets

    def refuse(*args, **kwargs):
        raise AssertionError(f"SymPy path used for {text!r}")
    with monkeypatch.context() as m:
        m.setattr(targets, "_parse_exact", refuse)
        return targets.parse_target(text, spectrum, normalize)


def _assert_equal_to_sympy(got: Target, want: Target) -> None:
    assert got.modes == want.modes
    np.testing.assert_allclose(got.coefficients, [float(c) for c in want.exact], rtol=1e-12, atol=0)
    assert got.constant == pytest.approx(float(want.constant_exact), rel=1e-12, abs=0)


NUMERIC_CASES = ["staircase(2)", "0.8*z0 + 0.6*h2(z1)", "staircase(5) + 0.3*h3(z2)", "z0^2 - 1", "(z0 + z1)^3 - z2",
                 "h3(z0)*z0 + h2(z0)*h2(z0)", "z0*z0*z0 - 3*z0", "1/3*z1 + sqrt(2)*z0*z1 + 2**(1/2)*h4(z3)",
                 "sqrt(0.3)*z1 + 2.5e-3*z0^2", "(1 + 1e-17)*z0 - z0 + z1", "-(z0 - 2*z1)^2/7 + 0.1",
                 "x0^2 + staircase(3)", "x0*x1 - x2 + pi*z3", "(x0 + x1)^2 - x0^2 - x1^2"]


@pytest.mark.parametrize("text", NUMERIC_CASES)
@pytest.mark.parametrize("normalize", [True, False])
def test_numeric_decomposition_equals_sympy(monkeypatch, text: str, normalize: bool) -> None:
    """Numeric configs decompose without SymPy: same modes, coefficients and constant equal to SymPy's values to
    1e-12 relative. The spectrum: a fresh non-rational power law (exponent 1.5001, offset 3.0001; SymPy's exact form
    of it takes minutes, so SymPy's reference gets the same eigenvalues as numbers) and the default power law (exact
    in SymPy: x_i = sqrt(g_i) z_i with g_i = (i+3)^(-3/2)/Σ_j (j+3)^(-3/2))."""
    fresh = Spectrum.power_law(8, exponent=1.5001, offset=3.0001)
    for spec, reference in ((fresh, Spectrum.from_eigenvalues(fresh.g.tolist())), (Spectrum.power_law(8), None)):
        got = _numeric_only(monkeypatch, text, spec, normalize)
        _assert_equal_to_sympy(got, _sympy_reference(text, reference or spec, normalize))


def test_numeric_decomposition_exact_form_on_demand(monkeypatch) -> None:
    """The exact SymPy coefficients are built when first read, and equal the SymPy decomposition's exactly."""
    got = _numeric_only(monkeypatch, "staircase(3) + 0.5*h2(z3)", 6, True)
    want = _sympy_reference("staircase(3) + 0.5*h2(z3)", 6, True)
    assert got.exact_factory is not None
    assert all(same(a, b) for a, b in zip(got.exact, want.exact)) and got.exact_factory is None
    assert same(got.constant_exact, want.constant_exact)


def test_numeric_decomposition_rotated_covariance(monkeypatch) -> None:
    """A full covariance: the float rotation's round-off cross terms are dropped as in the SymPy path."""
    spec = Spectrum.from_covariance([[2.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    for text in ("x0^2 + x1^2 + x2^2", "x0*x1 + 0.5*x2^2 - x1"):
        got = _numeric_only(monkeypatch, text, spec, False)
        _assert_equal_to_sympy(got, _sympy_reference(text, spec, False))


hermite_factors = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))


@given(st.dictionaries(hermite_factors, rationals, min_size=1, max_size=5), st.integers(1, 3), st.booleans(),
       st.booleans())
def test_numeric_decomposition_equals_sympy_random(terms: dict, power: int, stair: bool, normalize: bool) -> None:
    """Random sums of (p/q) h_a(z0) h_b(z1) z2^c, raised to a power, plus staircase(3): the numeric path (whatever it
    decides itself) equals SymPy's exact decomposition to 1e-12 relative, with the same modes."""
    parts = []
    for (a, b, c), f in terms.items():
        factors = [f"({f.numerator}/{f.denominator})"] + [f"h{a}(z0)"] * bool(a) + [f"h{b}(z1)"] * bool(b) \
            + [f"z2^{c}"] * bool(c)
        parts.append("*".join(factors))
    text = f"({' + '.join(parts)})^{power}" + (" + staircase(3)" if stair else "")
    want = _sympy_reference(text, 4, normalize) if any(
        m.degree for m in _sympy_reference(text, 4, False).modes) or not normalize else None
    if want is None:
        with pytest.raises(TargetError, match="no non-constant part"):
            parse_target(text, 4, normalize)
        return
    _assert_equal_to_sympy(parse_target(text, 4, normalize), want)


@pytest.mark.parametrize("dim", [0, -3, True, 2.0, "4", None])
def test_a_bad_dimension_is_named_before_the_expression_is_read(dim):
    """d = 0 said 'z0 is out of range for d = 0 (z0 … z-1)'; a float or None failed on a missing attribute."""
    with pytest.raises(TargetError, match=r"the dimension d = .* must be an integer ≥ 1"):
        parse_target("z0", dim)
    assert parse_target("z0*z1", np.int64(3)).dim == 3
