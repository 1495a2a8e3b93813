"""The spectral spread at init (featureode.kernel.spread) and the spread-aware backbone forms (replay, +spread).

Oracles: sampled finite networks (NumPy; exact per-neuron Gaussian projections, then a Monte Carlo over x of the
function ``K_Nφ_β``), with the Monte Carlo standard error over networks; explicit discrete spectral measures for the
residual forms (their Laplace transforms by direct summation, and the Chebyshev–Markov–Krein ordering).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from featureode.calculus.activations import get_activation
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.network import Network
from featureode.kernel.spread import (coupled_modes, infinite_width_spread, single_neuron_moments, spread_at_init,
                                      two_point_shift)
from featureode.ode.replay import spread_residual


def _network_second_moments(g, modes, width, n_nets, act="relu", bias_std=0.5, n_x=60_000, seed=0):
    """Per sampled network of ``width`` neurons (meanfield, κ = 1/N): ``λ_N`` (exact) and ``‖K_Nφ‖²`` (MC over x)."""
    rng = np.random.default_rng(seed)
    A_act = get_activation(act)
    lam_all, sq_all = [], []
    for _ in range(n_nets):
        w_hat = rng.standard_normal((width, g.size)) * np.sqrt(g)
        b = rng.standard_normal(width) * bias_std
        a = rng.standard_normal(width)
        s = np.linalg.norm(w_hat, axis=1)
        z = rng.standard_normal((n_x, g.size))
        u = z @ w_hat.T + b
        sig, dsig = np.maximum(u, 0.0), (u > 0).astype(float)
        lam_row, sq_row = [], []
        for mode in modes:
            mono = np.prod([w_hat[:, i] ** n for i, n in mode.items], axis=0) if mode.items else np.ones(width)
            norm = mono / math.sqrt(mode.factorial)
            mk = {o: A_act.mean_numpy(mode.degree + o)(b, s) for o in (0, 1, 2)}
            A, H = norm * mk[0], norm * mk[1]
            Gz = w_hat * (norm * mk[2])[:, None]          # E[h σ' z_i] (whitened)
            for i, e in mode.items:
                lower = np.prod([w_hat[:, i2] ** (e2 - (i2 == i)) for i2, e2 in mode.items], axis=0)
                Gz[:, i] += e * lower * mk[0] / math.sqrt(mode.factorial)
            Gx = Gz * np.sqrt(g)                          # E[h σ' x_i]
            lam_row.append(float(np.mean(A * A + a * a * ((Gx * Gx).sum(1) + H * H))))
            kphi = (sig @ A + ((dsig * a * a) * (z @ (Gx * np.sqrt(g)).T + H)).sum(1)) / width
            sq_row.append(float(np.mean(kphi**2)))
        lam_all.append(lam_row)
        sq_all.append(sq_row)
    return np.array(lam_all), np.array(sq_all)


@pytest.mark.parametrize("width,n_nets,n_x", [(4, 120, 20_000),
                                              pytest.param(48, 120, 60_000, marks=pytest.mark.slow)])
def test_finite_width_second_moment_and_variance_match_sampled_networks(width, n_nets, n_x):
    """E‖K_Nφ‖² and E[‖K_Nφ‖² − λ_N²] over sampled networks agree with (1 − 1/N)·(infinite width) + (1/N)·(single
    neuron) within 4 Monte Carlo standard errors (plus the x-sampling bias bound and the predicted tail/MC error)."""
    g = Spectrum.power_law(4, 1.5, 3).g
    modes = [Mode.parse(m) for m in ("z0", "z0*z1", "h2(z0)")]
    net = Network.build("relu", g, 0.5)
    pred = spread_at_init(net, modes, width, extra_degree=6, n_neurons=30_000)
    lam, sq = _network_second_moments(g, modes, width, n_nets, n_x=n_x)
    # the x Monte Carlo of ‖K_Nφ‖² is biased up by Var_x(K_Nφ)/n_x ≤ E[(K_Nφ)²]... of order sq/n_x: negligible here
    for j, p in enumerate(pred):
        se = sq[:, j].std(ddof=1) / math.sqrt(n_nets)
        err = math.hypot(4 * se, 4 * p.single.psi_sq_se / width) + p.infinite.tail + 3 * sq[:, j].mean() / n_x
        assert abs(sq[:, j].mean() - p.second_moment) < err, (str(p.mode), sq[:, j].mean(), p.second_moment, se)
        var = sq[:, j] - lam[:, j] ** 2
        se_v = var.std(ddof=1) / math.sqrt(n_nets)
        err_v = math.hypot(4 * se_v, 4 * p.single.var_se / width) + p.infinite.tail + 3 * sq[:, j].mean() / n_x
        assert abs(var.mean() - p.variance) < err_v, (str(p.mode), var.mean(), p.variance, se_v)
        assert lam[:, j].mean() == pytest.approx(p.lam, abs=4 * lam[:, j].std(ddof=1) / math.sqrt(n_nets))


def test_infinite_width_row_is_a_lower_bound_that_converges():
    """Σ_{|α| ≤ |β|+k} K_{αβ}² grows with k (every term ≥ 0) and its tail estimate at k = 2 covers most of the
    difference to k = 6 (the level sums fall slower than geometrically, so the estimate is low: it closes part of
    the gap, not all); the single-neuron mean of λ_k equals the exact λ_β."""
    net = Network.build("relu", Spectrum.power_law(6, 1.5, 3).g, 0.5)
    beta = Mode.parse("h3(z0)")
    rows = {k: infinite_width_spread(net, beta, k) for k in (2, 4, 6)}
    assert rows[2].truncated <= rows[4].truncated <= rows[6].truncated
    gap = rows[6].truncated - rows[2].truncated
    assert 0 < rows[2].tail and abs(rows[2].second_moment - rows[6].second_moment) < gap
    assert rows[6].truncated - rows[2].truncated < 0.01 * rows[6].truncated   # the row converges
    assert all(m.degree % 2 == 1 and m.order(0) % 2 == 1 for m in coupled_modes(beta, 6, 4))
    one = single_neuron_moments(net, [beta], 30_000)[0]
    assert one.lam == pytest.approx(rows[6].lam, abs=4 * one.lam_se)


def _laplace(atoms, weights, t):
    return float(np.sum(weights * np.exp(-atoms * t)))


def test_spread_residual_forms_bracket_every_measure_with_the_same_moments():
    """For random discrete measures on [0, L]: the 'twopoint' residual ≤ the true Laplace transform ≤ 'bound', both
    ≥ e^{−mean} (Jensen); 'gamma' equals the gamma law's Laplace transform (1 + θt)^{−k} by numerical integration;
    a two-point measure with an atom at L is reproduced exactly by 'twopoint'."""
    from scipy import integrate, stats

    rng = np.random.default_rng(3)
    L = 2.0
    for _ in range(40):
        k = rng.integers(2, 6)
        atoms = rng.uniform(0, L, k)
        atoms[0] = L
        wts = rng.dirichlet(np.ones(k))
        mu = float(wts @ atoms)
        var = float(wts @ atoms**2) - mu**2
        for t in (0.3, 1.0, 4.0):
            true = _laplace(atoms, wts, t)
            lo = float(spread_residual("twopoint", mu * t, math.sqrt(var) * t, L * t))
            hi = float(spread_residual("bound", mu * t, math.sqrt(var) * t))
            assert math.exp(-mu * t) - 1e-12 <= lo <= true + 1e-12 <= hi + 2e-12
    mu, var, t = 0.7, 0.3, 2.5
    shape, scale = mu**2 / var, var / mu
    ref = integrate.quad(lambda x: math.exp(-x * t) * stats.gamma.pdf(x, shape, scale=scale), 0, np.inf)[0]
    assert float(spread_residual("gamma", mu * t, math.sqrt(var) * t)) == pytest.approx(ref, rel=1e-8)
    atoms, wts = np.array([L, 0.4]), np.array([0.1, 0.9])
    mu = float(wts @ atoms)
    var = float(wts @ atoms**2) - mu**2
    got = float(spread_residual("twopoint", mu * 3, math.sqrt(var) * 3, L * 3))
    assert got == pytest.approx(_laplace(atoms, wts, 3), rel=1e-12)
    # the ODE's shift is the slow atom of that measure: ℓ = λ(1 − s)
    assert 0.4 == pytest.approx(mu * (1 - two_point_shift(mu, var, L)), rel=1e-12)


def test_spread_variant_lowers_each_eigenvalue_by_its_shift():
    """``lazy+spread`` on the target basis: λ_β(t) = λ_β(0)(1 − s_β) with s_β of spread_shift, so t50 is the lazy
    t50 divided by (1 − s_β) for a single mode."""
    from featureode.config import config_from_dict
    from featureode.kernel.spread import spread_shift
    from featureode.ode.solve import solve_config

    cfg = config_from_dict({"data": {"dim": 6}, "target": {"expr": "h3(z0)"},
                            "network": {"width": 64, "richness": 0.01},
                            "training": {"t_max": 5000.0},
                            "ode": {"basis": "target", "variants": ["lazy", "lazy+spread"], "method": "LSODA"}})
    res = solve_config(cfg)
    net = Network.from_config(cfg)
    s = spread_shift(net, [Mode.parse("h3(z0)")], 64)[0]
    assert 0 < s < 1
    lazy, spread = res.variants["lazy"], res.variants["lazy+spread"]
    assert spread.t50 == pytest.approx(lazy.t50 / (1 - s), rel=1e-5)
    np.testing.assert_allclose(spread.lam, lazy.lam * (1 - s), rtol=1e-10)
