"""Kernel theory at initialization (issue 3), each quantity against an independent oracle.

Oracles: the empirical NTK of a finite-width torch network at init (autograd, Monte Carlo over x, repeats for error
bars); the closed-form arc-cosine kernels Taylor-expanded by mpmath; Monte Carlo over init neurons with hand-written
ReLU derivative means; scipy quadrature over the exact Gamma law of |ŵ|² for isotropic data; the theory values.
"""
from __future__ import annotations

import itertools
import json
import math
import warnings

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, special, stats

from featureode.calculus.activations import ActivationError, get_activation
from featureode.config import config_from_dict
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.theory import (KernelError, closure_constants, compare_exact_hea, exact_eigenvalues,
                               extended_basis, gram_matrix, hea_eigenvalues, kernel_report,
                               kernel_theory, level_coefficient_exprs, level_coefficients)

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------------------------
# oracle 1: empirical NTK of a finite-width network
# ----------------------------------------------------------------------------------------------------------------
def _lhs_normal(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Latin-hypercube N(0, I_d) samples (unbiased for every expectation; removes main-effect noise)."""
    u = (np.argsort(rng.random((n, d)), axis=0) + rng.random((n, d))) / n
    return special.ndtri(u)


def empirical_rayleigh(activation: str, modes: list[Mode], g: np.ndarray, bias_std: float, width: int,
                       n_base: int, rng: np.random.Generator, gamma: float = 0.5) -> np.ndarray:
    """``λ_β = γ² N |∇_θ E_x[h_β f]|²`` of one freshly initialised network ``f = (1/(γN)) Σ a σ(w·x + b)``.

    Unbiased: the squared norm is the inner product of the gradients estimated on two independent halves of x.
    Each half is ``n_base`` Latin-hypercube samples, each with all sign flips of the modes' support coordinates
    (each flipped copy has the law of x, so the estimate of ``E_x`` stays unbiased; pairing them cancels the parts
    of f of the wrong parity, a large variance reduction).
    """
    sig = get_activation(activation).torch()
    d, dt = len(g), torch.float32
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    a = torch.randn(width, generator=gen, dtype=dt).requires_grad_()
    w = torch.randn(width, d, generator=gen, dtype=dt).requires_grad_()
    b = (bias_std * torch.randn(width, generator=gen, dtype=dt)).requires_grad_()
    support = sorted({i for m in modes for i in m.support})
    flips = np.ones((2 ** len(support), d))
    flips[:, support] = list(itertools.product((1.0, -1.0), repeat=len(support)))
    scale = torch.tensor(np.sqrt(g), dtype=dt)
    halves = []
    for _ in range(2):
        z = torch.tensor((_lhs_normal(n_base, d, rng)[None] * flips[:, None, :]).reshape(-1, d), dtype=dt)
        f = sig(z * scale @ w.T + b) @ a / (gamma * width)
        proj = torch.stack([m.evaluate(z) for m in modes]) @ f / z.shape[0]
        grads = []
        for i in range(len(modes)):
            gr = torch.autograd.grad(proj[i], (a, w, b), retain_graph=i < len(modes) - 1)
            grads.append(torch.cat([t.reshape(-1) for t in gr]).double())
        halves.append(grads)
    return np.array([gamma**2 * width * float(halves[0][i] @ halves[1][i]) for i in range(len(modes))])


def _check_against_network(activation: str, texts: list[str], width: int, n_base: int, repeats: int,
                           seed: int) -> None:
    modes = [Mode.parse(t) for t in texts]
    g = Spectrum.power_law(16).g
    rng = np.random.default_rng(seed)
    reps = np.array([empirical_rayleigh(activation, modes, g, 0.5, width, n_base, rng) for _ in range(repeats)])
    mean, se = reps.mean(0), reps.std(0, ddof=1) / math.sqrt(repeats)
    exact, stderr = exact_eigenvalues(modes, g, activation, 0.5)
    assert np.all(stderr == 0)
    # each repeat is an unbiased estimate (the eNTK averages over neurons; the two halves of x are independent), so
    # the mean of ``repeats`` is Student-t with repeats − 1 degrees of freedom: a Bonferroni bar over the modes
    # that all comparisons together exceed with probability 1%
    bar = stats.t.ppf(1 - 0.01 / (2 * len(modes)), repeats - 1)
    for t, m, s, e in zip(texts, mean, se, exact):
        assert abs(m - e) <= bar * s, f"{activation} {t}: network {m:.5g} ± {s:.2g} (bar {bar:.2f}), theory {e:.5g}"


def test_exact_eigenvalues_match_finite_width_network_fast():
    """z0, h2(z0) and the staircase(2) modes at d = 16 against a width-4096 ReLU network at init."""
    _check_against_network("relu", ["z0", "h2(z0)", "z0*z1"], width=4096, n_base=1024, repeats=6, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_exact_eigenvalues_match_finite_width_network_slow(activation):
    """The target suite (z0, h2(z0), z0*z1, staircase(3) modes) at d = 16, width 8192, tighter error bars."""
    _check_against_network(activation, ["z0", "h2(z0)", "z0*z1", "z0*z1*z2"], width=8192, n_base=2048,
                           repeats=10, seed=2)


# ----------------------------------------------------------------------------------------------------------------
# oracle 2: Monte Carlo over neurons, scipy quadrature over the Gamma law of |ŵ|²
# ----------------------------------------------------------------------------------------------------------------
def _relu_mean(k: int, b, s):
    """ReLU derivative means by hand: m_0 = bΦ + sφ, m_1 = Φ, m_2 = φ/s, m_3 = −(b/s) φ/s² (t = b/s); works on
    floats and arrays."""
    t = b / s
    pdf = np.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    cdf = special.ndtr(t)
    return (b * cdf + s * pdf, cdf, pdf / s, -t * pdf / s**2)[k]


def test_closure_constants_against_monte_carlo_over_neurons():
    """c_l = E_k[a² m_l(b, |ŵ|)²]: a, w, b sampled, hand-written ReLU means; within 4 standard errors."""
    spectrum = Spectrum.power_law(16)
    c = closure_constants("relu", spectrum, 0.5, 3)
    rng = np.random.default_rng(3)
    n = 400_000
    a = rng.standard_normal(n)
    s = np.sqrt(np.sum(rng.standard_normal((n, 16)) ** 2 * spectrum.g, axis=1))
    b = 0.5 * rng.standard_normal(n)
    for level in range(4):
        vals = a**2 * _relu_mean(level, b, s) ** 2
        mc, se = vals.mean(), vals.std(ddof=1) / math.sqrt(n)
        assert abs(c[level] - mc) <= 4 * se, (level, c[level], mc, se)


@pytest.mark.parametrize("activation,dim,iso,n", [("relu", 4, False, 200_000), ("tanh", 8, False, 20_000),
                                                  ("relu", 128, True, 200_000), ("step", 8, False, 200_000),
                                                  ("relu", 10_000, False, 10_000)])
def test_quadrature_matches_monte_carlo_over_neurons(activation, dim, iso, n):
    """The deterministic average over (ŵ, b) agrees with Monte Carlo over neurons of the same per-neuron projections
    (small d: singular |ŵ| → 0 region; isotropic d = 128: the concentrated law of |ŵ|²; step: classical order 0;
    d = 10 000: the law's contour product below float64's range, once a ZeroDivisionError from d ≈ 7000)."""
    spectrum = Spectrum.power_law(dim, 0.0, 1.0) if iso else Spectrum.power_law(dim)
    modes = ["1", "z0", "h2(z0)", "z0*z1", "z0*z1*z2", "h3(z1)"] if dim >= 3 else ["1", "z0", "z0*z1"]
    exact, _ = exact_eigenvalues(modes, spectrum, activation, 0.5)
    mc, se = exact_eigenvalues(modes, spectrum, activation, 0.5, method="montecarlo", n_neurons=n, seed=4)
    assert np.all(se > 0)
    assert np.all(np.abs(exact - mc) <= 4.5 * se), (exact, mc, se)


def _relu_mean_any(k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """m_k for ReLU at any order: m_0, m_1 as above; m_k = (−1)^k He_{k−2}(t) φ(t) / s^{k−1} for k ≥ 2."""
    if k < 2:
        return _relu_mean(k, b, s)
    t = b / s
    he = np.polynomial.hermite_e.hermeval(t, [0] * (k - 2) + [1])
    return (-1) ** k * he * np.exp(-t * t / 2) / math.sqrt(2 * math.pi) / s ** (k - 1)


def _mc_features(modes: list, g: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    """Per-neuron eNTK features of each mode for ``n`` ReLU neurons sampled from the init law (a ~ N(0,1), ŵ_i ~
    N(0, g_i), b ~ N(0, 0.25)): the readout projection A_β, the first-layer vector a G_{β·} and the bias part a H_β,
    from the explicit projections (no summation over i done by hand), each divided by sqrt(β!)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    wh = rng.standard_normal((n, g.size)) * np.sqrt(g)
    b = 0.5 * rng.standard_normal(n)
    s = np.sqrt(np.sum(wh**2, axis=1))
    feats = []
    for m in modes:
        p = m.degree
        mono = np.prod([wh[:, i] ** o for i, o in m.items], axis=0) if m.items else np.ones(n)
        G = np.sqrt(g) * (mono[:, None] * wh * _relu_mean_any(p + 2, b, s)[:, None])
        for i, o in m.items:
            G[:, i] += math.sqrt(g[i]) * o * mono / wh[:, i] * _relu_mean_any(p, b, s)
        feats.append(np.concatenate([(mono * _relu_mean_any(p, b, s))[:, None], a[:, None] * G,
                                     (a * mono * _relu_mean_any(p + 1, b, s))[:, None]], axis=1)
                     / math.sqrt(m.factorial))
    return feats


def test_gram_against_explicit_per_neuron_projections():
    """Every Gram entry (off-diagonal couplings included) against Monte Carlo over neurons of the explicit
    projections A_β, H_β and the vector G_{β·} (no summation over i done by hand, a² sampled)."""
    g = Spectrum.power_law(6).g
    modes = [Mode.parse(t) for t in ("1", "z0", "h2(z0)", "h3(z0)", "z0*z1", "z0*h2(z1)", "h2(z1)")]
    k = gram_matrix(modes, g, "relu", 0.5)
    n = 300_000
    feats = _mc_features(modes, g, n, seed=5)
    for i in range(len(modes)):
        for j in range(i, len(modes)):
            vals = np.sum(feats[i] * feats[j], axis=1)
            mc, se = vals.mean(), vals.std(ddof=1) / math.sqrt(n)
            if k[i, j] == 0:
                assert abs(mc) <= 4.5 * se, (modes[i], modes[j])
            else:
                assert abs(k[i, j] - mc) <= 4.5 * se, (modes[i], modes[j], k[i, j], mc, se)


@pytest.mark.parametrize("dim", [6, 200])
def test_closure_constants_isotropic_against_gamma_law(dim):
    """Isotropic g_i = 1/d: |ŵ|² ~ Gamma(d/2, scale 2/d) exactly; scipy double quadrature over (|ŵ|², b).
    d = 6 exercises the density (Talbot) method, d = 200 the Gauss-rule fallback."""
    c = closure_constants("relu", Spectrum.power_law(dim, 0.0, 1.0), 0.5, 2)
    law = stats.gamma(dim / 2, scale=2 / dim)
    for level in range(3):
        def inner(q: float) -> float:
            s = math.sqrt(q)
            return integrate.quad(lambda b: _relu_mean(level, b, s) ** 2 * math.exp(-2 * b * b) / (0.5 * math.sqrt(
                2 * math.pi)), -8, 8, points=[0.0], epsabs=1e-12, epsrel=1e-10)[0]

        ref = integrate.quad(lambda q: inner(q) * law.pdf(q), 0, law.ppf(1 - 1e-15), limit=200, epsabs=1e-12,
                             epsrel=1e-10)[0]
        assert c[level] == pytest.approx(ref, rel=1e-7)


def test_quadrature_converged():
    """Halving the grid step changes eigenvalues and Gram entries by < 1e-9 (relu and a quadrature activation)."""
    spectrum = Spectrum.power_law(16)
    for act, modes in (("relu", ["1", "z0", "h2(z0)", "z0*z1", "z0*z1*z2", "z0*h2(z1)", "h3(z0)"]),
                       ("tanh", ["1", "z0", "z0*z1"])):
        coarse = gram_matrix(modes, spectrum, act, 0.5)
        fine = gram_matrix(modes, spectrum, act, 0.5, step=0.05)
        assert np.max(np.abs(coarse - fine)) <= 1e-9 * np.max(np.abs(fine))


# ----------------------------------------------------------------------------------------------------------------
# Gram matrices
# ----------------------------------------------------------------------------------------------------------------
_MODE = st.dictionaries(st.integers(0, 5), st.integers(1, 3), max_size=3).filter(
    lambda m: sum(m.values()) <= 4).map(Mode.from_dict)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MODE, min_size=2, max_size=8, unique=True), st.sampled_from(["relu", "erf", "gelu"]))
def test_gram_psd_and_order_independent_on_random_mode_lists(modes, activation):
    """Each part (readout, weights, bias) is a Gram matrix of per-neuron features, so PSD (the quadrature could
    break it); the Gram on the reversed mode list, where every off-diagonal entry is computed with the roles of α
    and β swapped (the (α·g)/(β·g) terms exchange), is the same matrix reversed."""
    spectrum = Spectrum.power_law(6)
    parts = gram_matrix(modes, spectrum, activation, 0.3, parts=True)
    rev = gram_matrix(modes[::-1], spectrum, activation, 0.3, parts=True)
    for name in ("readout", "weights", "bias"):
        k = parts[name]
        assert np.linalg.eigvalsh(k).min() >= -1e-10 * max(1.0, np.abs(k).max()), name
        np.testing.assert_allclose(rev[name][::-1, ::-1], k, rtol=1e-12, atol=1e-15 * np.abs(k).max())


def test_staircase_gram_is_diagonal_against_monte_carlo():
    """The staircase modes z0, z0*z1, z0*z1*z2 have different parity in some coordinate pairwise, so their
    off-diagonal Gram entries vanish; checked against Monte Carlo over neurons of the explicit projections (the
    per-neuron features of :func:`_mc_features`), not against the parity rule."""
    g = Spectrum.power_law(6).g
    modes = [Mode.parse(t) for t in ("z0", "z0*z1", "z0*z1*z2")]
    k = gram_matrix(modes, g, "relu", 0.5)
    n = 200_000
    feats = _mc_features(modes, g, n, seed=8)
    for i in range(3):
        for j in range(i + 1, 3):
            vals = np.sum(feats[i] * feats[j], axis=1)
            assert k[i, j] == 0 and abs(vals.mean()) <= 4.5 * vals.std(ddof=1) / math.sqrt(n), (i, j)


# ----------------------------------------------------------------------------------------------------------------
# HEA
# ----------------------------------------------------------------------------------------------------------------
def _arccos_theta(rho: mpmath.mpf, bias_std: float) -> mpmath.mpf:
    """NTK on the unit sphere from the closed-form arc-cosine kernels: (u, u') Gaussian with variances 1 + σ_b²
    and covariance ρ + σ_b²; Θ = k_1 + k_0 (ρ + 1), k_1 = v (sin θ + (π − θ) cos θ)/(2π), k_0 = (π − θ)/(2π)."""
    v = 1 + mpmath.mpf(bias_std) ** 2
    th = mpmath.acos((rho + mpmath.mpf(bias_std) ** 2) / v)
    k1 = v * (mpmath.sin(th) + (mpmath.pi - th) * mpmath.cos(th)) / (2 * mpmath.pi)
    k0 = (mpmath.pi - th) / (2 * mpmath.pi)
    return k1 + k0 * (rho + 1)


def test_relu_level_coefficients_against_arccos_taylor_expansion():
    lam = level_coefficients("relu", 0.5, 6)
    with mpmath.workdps(40):
        taylor = mpmath.taylor(lambda r: _arccos_theta(r, 0.5), 0, 6)
    ref = [float(c * mpmath.factorial(n)) for n, c in enumerate(taylor)]
    assert lam == pytest.approx(ref, rel=1e-10, abs=1e-13)
    assert lam[1:4] == pytest.approx([0.694, 0.412, 0.184], abs=5e-4)     # theory §4


def _erf_theta(rho: mpmath.mpf, bias_std: float) -> mpmath.mpf:
    """erf NTK on the unit sphere from the closed-form arcsine kernels (Williams 1997): (u, u') Gaussian with
    variances v = 1 + σ_b² and covariance c = ρ + σ_b²; E[erf u erf u'] = (2/π) arcsin(2c/(1 + 2v)),
    E[erf' u erf' u'] = (4/π) E[e^{−u²−u'²}] = (4/π) det(I + 2Σ)^{−1/2}; Θ = k_1 + k_0 (ρ + 1)."""
    v = 1 + mpmath.mpf(bias_std) ** 2
    c = rho + mpmath.mpf(bias_std) ** 2
    k1 = 2 / mpmath.pi * mpmath.asin(2 * c / (1 + 2 * v))
    k0 = 4 / mpmath.pi / mpmath.sqrt((1 + 2 * v) ** 2 - 4 * c**2)
    return k1 + k0 * (rho + 1)


def test_erf_level_coefficients_against_arcsine_taylor_expansion():
    """Λ_l = l! [ρ^l] Θ(ρ) for erf, numerically (Gauss–Hermite in b) and in closed form (the SymPy expressions),
    against the arcsine-kernel NTK Taylor-expanded by mpmath."""
    with mpmath.workdps(40):
        taylor = mpmath.taylor(lambda r: _erf_theta(r, 0.5), 0, 5)
    ref = [float(c * mpmath.factorial(n)) for n, c in enumerate(taylor)]
    assert list(level_coefficients("erf", 0.5, 5)) == pytest.approx(ref, rel=1e-10, abs=1e-13)
    exprs = level_coefficient_exprs("erf", 0.5, 5)
    assert all(e is not None for e in exprs)
    assert [float(e) for e in exprs] == pytest.approx(ref, rel=1e-12, abs=1e-14)


def test_level_coefficient_closed_forms():
    relu = level_coefficient_exprs("relu", 0.5, 5)
    assert relu[0] is None                                                # b²Φ² terms: no closed form attempted
    assert [float(e) for e in relu[1:]] == pytest.approx(list(level_coefficients("relu", 0.5, 5)[1:]), rel=1e-12)
    erf = level_coefficient_exprs("erf", 0.5, 4)
    assert [float(e) for e in erf] == pytest.approx(list(level_coefficients("erf", 0.5, 4)), rel=1e-12)
    sb = __import__("sympy").Symbol("sigma_b", positive=True)
    assert level_coefficient_exprs("relu", sb, 2)[2].has(sb)


def test_hea_approaches_exact_as_dimension_grows():
    """Isotropic data: |x|² concentrates, so HEA/exact → 1 at levels 1–3 (monotonically over d = 8, 32, 128)."""
    modes = ["z0", "z0*z1", "z0*z1*z2"]
    dev = []
    for d in (8, 32, 128):
        rows = compare_exact_hea(modes, Spectrum.power_law(d, 0.0, 1.0), "relu", 0.5)
        dev.append([abs(r["hea_over_exact"] - 1) for r in rows])
    dev = np.array(dev)
    assert np.all(np.diff(dev, axis=0) < 0)
    assert np.all(dev[-1] < [0.002, 0.02, 0.06])


def test_hea_overestimates_levels_2_and_3_on_the_default_spectrum():
    """theory §4: for ReLU, σ_b = 0.5 at d = 16 (power law 1.5, offset 3) the exact λ_β(0) are noticeably smaller
    than HEA at levels 2 and 3 (|x| fluctuates), the more so the higher the level."""
    rows = compare_exact_hea(["z0", "z0*z1", "z0*z1*z2"], Spectrum.power_law(16), "relu", 0.5)
    ratio = [r["hea_over_exact"] for r in rows]
    assert ratio[0] < ratio[1] < ratio[2] and ratio[1] > 1.2


def test_hea_eigenvalues_formula():
    spectrum = Spectrum.power_law(8)
    lam = np.array([0.5, 0.7, 0.4])
    got = hea_eigenvalues(["1", "z3", "h2(z1)", "z0*z2"], spectrum, lam)
    g = spectrum.g
    assert got == pytest.approx([0.5, 0.7 * g[3], 0.4 * g[1] ** 2, 0.4 * g[0] * g[2]], rel=1e-15)
    with pytest.raises(KernelError, match="Λ_3"):
        hea_eigenvalues(["z0*z1*z2"], spectrum, lam)


# ----------------------------------------------------------------------------------------------------------------
# extended basis, config level, CLI report, figure
# ----------------------------------------------------------------------------------------------------------------
def test_extended_basis_parity_budget_and_order():
    g = Spectrum.power_law(8).g
    targets = [Mode.parse("z0"), Mode.parse("z0*z1")]
    basis = extended_basis(targets, 8, 2, 12, g=g)
    assert basis[:2] == targets and len(basis) == 12 and len(set(basis)) == 12
    for m in basis:
        assert any(all((m.order(i) - t.order(i)) % 2 == 0 for i in range(8)) and m.degree <= t.degree + 2
                   for t in targets)
    assert basis[2] in (Mode.parse("h3(z0)"), Mode.parse("h3(z0)*z1"))   # strongest coupling: along g_0
    assert Mode() in extended_basis([Mode.parse("h2(z0)")], 8, 0, 3, g=g)  # constant couples to h2(z0)
    k = gram_matrix(basis, g, "relu", 0.5)
    assert np.all(np.abs(k[0, 2:]) + np.abs(k[1, 2:]) > 0)               # every extra mode couples to a target


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(KernelError, match=r"candidate modes.*estimated.*s"):
        extended_basis([Mode.parse("z0*z1*z2")], 128, 8, 40)
    with pytest.raises(KernelError, match="estimated"):
        gram_matrix([Mode.parse(f"z{i}") for i in range(400)], np.full(400, 1 / 400), "relu", 0.5, max_cost_s=10)
    with pytest.raises(ActivationError, match=r"'step'.*order 1"):
        closure_constants("step", Spectrum.power_law(2), 0.0, 1)          # E[m_1²] = φ(0)² E[1/|ŵ|²] = ∞ at d = 2
    with pytest.raises(ActivationError, match=r"'step'.*order 3"):
        exact_eigenvalues(["z0"], [1.0], "step", 0.0)                     # d = 1: E[ŵ_0² P m_3(0, |ŵ|)²] = ∞
    with pytest.raises(KernelError, match="MAX_ORDER|supported order"):
        exact_eigenvalues(["h25(z0)"], Spectrum.power_law(4), "erf", 0.5)


def _config(**over):
    raw = {"data": {"dim": 16}, "target": {"expr": "staircase(3)"}, "network": {"activation": "relu"}}
    for sec, vals in over.items():
        raw.setdefault(sec, {}).update(vals)
    return config_from_dict(raw)


def test_unlearnable_target_mode_warns():
    """σ(u) = u² is a polynomial of degree 2, so σ(w·x + b) has no Hermite component of degree 3: the init NTK
    eigenvalue of z0*z1*z2 is 0 (by the degree argument, not by the code) and kernel_theory says so; the degree-2
    mode z0*z1 of the same target is learnable and not named."""
    from featureode.kernel.theory import KernelWarning

    cfg = _config(network={"activation": "x**2"}, target={"expr": "z0*z1*z2 + z0*z1"}, data={"dim": 4})
    with pytest.warns(KernelWarning, match=r"mode\(s\) z0\*z1\*z2 have init NTK eigenvalue") as rec:
        theory = kernel_theory(cfg)
    assert "z0*z1," not in str(rec[0].message)
    lam = dict(zip(map(str, theory.modes), theory.lambda_exact))
    assert lam["z0*z1*z2"] == 0 and lam["z0*z1"] > 0
    # a tiny but genuine eigenvalue (relu, six weak directions of d = 64: λ ≈ 3e-15, of the order of its HEA value
    # Λ_6 g^β) is not "zero"
    tiny = _config(target={"expr": "z58*z59*z60*z61*z62*z63"}, data={"dim": 64})
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelWarning)
        theory = kernel_theory(tiny)
    assert 0 < theory.lambda_exact[0] < 1e-13 and theory.lambda_exact[0] / theory.lambda_hea[0] > 1e-3


def test_kernel_report_contract_staircase3():
    """Keys of theory §6, a deterministic quadrature converged to 1e-9, HEA from the theory values of Λ_1..3 (ReLU,
    σ_b = 0.5), κ from c_1 by Monte Carlo over neurons (c_1 = E[Φ(b/|ŵ|)²], hand-written)."""
    rep = json.loads(json.dumps(kernel_report(_config())))
    assert {"modes", "exact", "exact_stderr", "hea", "c", "level_coefficients"} <= set(rep)
    assert rep["modes"] == ["z0", "z0*z1", "z0*z1*z2"]
    assert rep["exact_stderr"] == [0.0, 0.0, 0.0]
    assert max(e / x for e, x in zip(rep["exact_quadrature_error"], rep["exact"])) < 1e-9
    g = Spectrum.power_law(16).g
    assert rep["hea"] == pytest.approx([0.694 * g[0], 0.412 * g[0] * g[1], 0.184 * g[0] * g[1] * g[2]], rel=2e-3)
    assert len(rep["c"]) == len(rep["level_coefficients"]) == 4
    rng = np.random.default_rng(11)
    n = 400_000
    s = np.sqrt(np.sum(rng.standard_normal((n, 16)) ** 2 * g, axis=1))
    vals = special.ndtr(0.5 * rng.standard_normal(n) / s) ** 2
    c1, se = vals.mean(), vals.std(ddof=1) / math.sqrt(n)
    assert abs(rep["kappa"] - 0.25 * c1 / 0.694**2) <= 0.25 / 0.694**2 * (4 * se + 2e-3 * c1)


def test_kernel_theory_target_and_extended():
    kt = kernel_theory(_config(ode={"basis": "extended", "extended_max_modes": 10}))
    assert len(kt.modes) == 10 and kt.gram is not None and kt.gram.shape == (10, 10)
    assert kt.target[:3] == pytest.approx([1 / math.sqrt(3)] * 3) and np.all(kt.target[3:] == 0)
    assert set(kt.gram_parts) == {"readout", "weights", "bias", "total"}
    assert kt.network is not None and kt.network.dim == 16 and kt.network.activation.name == "relu"
    plain = kernel_theory(_config(), basis="target")
    assert plain.gram is None and plain.lambda_exact == pytest.approx(kt.lambda_exact[:3], rel=1e-14)


# ----------------------------------------------------------------------------------------------------------------
# shared state: caches, the build-once network, the batch path
# ----------------------------------------------------------------------------------------------------------------
def _kernel_values(spectrum, act: str, bias: float) -> tuple:
    modes = ["1", "z0", "h2(z0)", "z0*z1"]
    parts = gram_matrix(modes, spectrum, act, bias, parts=True)
    return (*[parts[k] for k in ("readout", "weights", "bias")], closure_constants(act, spectrum, bias, 3),
            level_coefficients(act, bias, 3))


def test_shared_caches_give_the_same_numbers_as_fresh_computations():
    """Two spectra with the same Σg (they share the grid and so the activation's mean table), two σ_b, relu and
    tanh, interleaved in one process; then each recomputed alone after clearing every cache, and after histories
    that leave other integrals and wider measures in the caches: bitwise equal."""
    from featureode.kernel.theory import clear_caches

    cases = [(Spectrum.power_law(8), "relu", 0.5), (Spectrum.power_law(12, 1.0, 2.0), "relu", 1.0),
             (Spectrum.power_law(8), "relu", 1.0), (Spectrum.power_law(12, 1.0, 2.0), "relu", 0.5),
             (Spectrum.power_law(8), "tanh", 0.0), (Spectrum.power_law(12, 1.0, 2.0), "tanh", 0.0)]
    together = [_kernel_values(*c) for c in cases]
    for c, want in zip(cases[::-1], together[::-1]):
        clear_caches()
        got = _kernel_values(*c)
        for x, y in zip(got, want):
            assert np.array_equal(x, y), c
    assert not np.allclose(together[0][0], together[2][0])      # σ_b matters: the caches are keyed on it
    # a history that extends the shared measures below the rows these integrands need (a more singular integrand
    # first) and batches other integrals beside them: still the fresh numbers, bit for bit (it was not: each row was
    # summed at a position of one gathered product that the batch and the measures' extent set)
    for history in (lambda sp: closure_constants("relu", sp, 0.5, 4),
                    lambda sp: gram_matrix(["1", "z3"], sp, "relu", 0.5),
                    lambda sp: gram_matrix(["h4(z1)", "z0*z1*z2"], sp, "relu", 0.5)):
        clear_caches()
        history(cases[0][0])
        got = _kernel_values(*cases[0])
        for x, y in zip(got, together[0]):
            assert np.array_equal(x, y)


def test_build_once_network_and_batch_equal_kernel_theory():
    """kernel_theory with a prebuilt Network and target, and kernel_theory_batch over configs differing in γ, d,
    target, activation and σ_b, give exactly what kernel_theory gives config by config."""
    from featureode.kernel.theory import kernel_theory_batch
    from featureode.kernel.network import Network

    cfgs = [_config(network={"richness": r, "bias_std": sb, "activation": act}, data={"dim": d},
                    target={"expr": t}, ode={"extended_max_modes": 12})
            for r, sb, act, d, t in [(0.5, 0.5, "relu", 16, "staircase(2)"), (0.05, 0.5, "relu", 16, "staircase(2)"),
                                     (0.5, 1.0, "erf", 8, "z0 + h2(z1)"), (0.2, 0.0, "gelu", 8, "z0*z1")]]
    batch = kernel_theory_batch(cfgs, basis="extended")
    for cfg, kt in zip(cfgs, batch):
        one = kernel_theory(cfg, basis="extended")
        assert kt.modes == one.modes and kt.gamma == cfg.network.richness
        for name in ("lambda_exact", "c", "level_coefficients", "gram", "lambda_hea"):
            assert np.array_equal(getattr(kt, name), getattr(one, name)), name
        spectrum = cfg.spectrum()
        pre = kernel_theory(cfg, basis="extended", network=Network.from_config(cfg, spectrum),
                            target=cfg.target_obj(spectrum))
        assert np.array_equal(pre.gram, one.gram)
    assert batch[0].network is batch[1].network                   # configs differing only in γ share it
    # ... and the γ-free theory (computed once): equal arrays, each config's own copies, its own γ and κ = γ² c_1/Λ_1²
    a, b = batch[0], batch[1]
    assert (a.gamma, b.gamma) == (0.5, 0.05) and np.array_equal(a.lambda_exact, b.lambda_exact)
    assert a.kappa == pytest.approx(0.25 * a.c[1] / a.level_coefficients[1] ** 2, rel=1e-15)
    assert b.kappa == pytest.approx(0.0025 * b.c[1] / b.level_coefficients[1] ** 2, rel=1e-15)
    assert not np.shares_memory(a.lambda_exact, b.lambda_exact) and not np.shares_memory(a.gram, b.gram)
    assert not np.shares_memory(a.gram_parts["weights"], b.gram_parts["weights"])


def test_readout_variance_scales_the_a_squared_terms():
    """Θ = E[σσ'] + E[a²] E[σ'σ' (x·x' + 1)]: a parametrization with E[a²] = 2 doubles the weights and bias parts
    and c_l = E[a² m_l²], and leaves the readout (NNGP) part alone."""
    from dataclasses import dataclass

    from featureode.kernel.theory import network_closure, network_gram
    from featureode.kernel.network import Network
    from featureode.kernel.parametrization import MeanField

    @dataclass(frozen=True)
    class Doubled(MeanField):
        name: str = "doubled-readout"

        @property
        def readout_variance(self) -> float:
            return 2.0

    modes = [Mode.parse(t) for t in ("z0", "h2(z0)", "z0*z1")]
    g = Spectrum.power_law(8)
    one, two = Network.build("relu", g, 0.5), Network.build("relu", g, 0.5, Doubled())
    k1, k2 = network_gram(one, modes), network_gram(two, modes)
    assert np.array_equal(k1["readout"], k2["readout"])
    for part in ("weights", "bias"):
        np.testing.assert_allclose(k2[part], 2 * k1[part], rtol=1e-15)
    np.testing.assert_allclose(network_closure(two, 3), 2 * network_closure(one, 3), rtol=1e-15)


def test_exact_vs_hea_figure(tmp_path):
    from featureode.export.hea_figure import exact_vs_hea_figure  # moved to the export layer (issue 21)

    out = tmp_path / "fig.png"
    data = exact_vs_hea_figure(out, dims=(8, 32), max_level=2)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(data["panels"]["isotropic"]) == {"z0", "z0*z1", "h2(z0)"}


def test_derivation_script_verifies_and_compiles(tmp_path):
    """derivations/kernel_derivation.py asserts its identities with SymPy and writes LaTeX that compiles."""
    import importlib.util
    import shutil
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "derivations" / "kernel_derivation.py"
    spec = importlib.util.spec_from_file_location("kernel_derivation", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    compile_ = shutil.which("pdflatex") is not None
    out = mod.main(["--out", str(tmp_path / "k.tex")] + (["--compile"] if compile_ else []))
    assert r"\Lambda_{3}" in out.read_text()
    if compile_:
        assert out.with_suffix(".pdf").stat().st_size > 0
