"""The exact population loss (``featureode.kernel.population``) against independent oracles: mpmath quadrature of
each pair moment in its conditional form, the classical zero-bias kernels (arc-cosine, arcsine), the one-dimensional
limits at ρ = ±1, the Stein overlap against 1-D/2-D quadrature, Monte Carlo with stated error bars for whole
networks (a nearly lazy one included), and a trained network's checkpoint evaluated on fresh samples."""
from __future__ import annotations

import math
import sys
import zlib
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
import torch

import featureode.kernel.population as population
from featureode.calculus.activations import get_activation
from featureode.calculus.targets import parse_target
from featureode.kernel.population import (PopulationError, centred_neurons, has_exact_population_loss,
                                          pair_moments, population_loss)

sys.path.insert(0, str(Path(__file__).parent))
from test_mlp import small_cfg  # noqa: E402

from featureode.results.trajectory import Trajectory  # noqa: E402
from featureode.sim.mlp import MLPError, simulate_config  # noqa: E402


def _oracle(act: str, b1: float, s1: float, b2: float, s2: float, c: float) -> float:
    """``E[σ(u) σ(v)] = E_u[σ(u) E[σ(v) | u]]`` by mpmath quadrature at 30 digits over ``u = b1 + s1 ξ`` (split at
    the ReLU kink), with the conditional mean in closed form: ``v | ξ ~ N(μ, τ²)``, ``μ = b2 + s2 ρ ξ``,
    ``τ = s2 sqrt(1 − ρ²)``, and ``E[relu] = μΦ(μ/τ) + τφ(μ/τ)``, ``E[erf] = erf(μ/sqrt(1 + 2τ²))`` (neither the
    bivariate moments nor Price's theorem)."""
    mp.mp.dps = 30
    b1, s1, b2, s2, c = (mp.mpf(v) for v in (b1, s1, b2, s2, c))
    rho = c / (s1 * s2)
    tau = s2 * mp.sqrt(1 - rho**2)
    if act == "relu":
        def inner(mu):
            return mu * mp.ncdf(mu / tau) + tau * mp.npdf(mu / tau)
        f, cut = (lambda u: max(u, 0)), -b1 / s1
    else:
        def inner(mu):
            return mp.erf(mu / mp.sqrt(1 + 2 * tau**2))
        f, cut = mp.erf, 0
    return float(mp.quad(lambda x: f(b1 + s1 * x) * inner(b2 + s2 * rho * x) * mp.npdf(x), [-mp.inf, cut, mp.inf]))


PAIRS = [(0.31, 1.2, -0.45, 0.8, 0.6), (-1.1, 0.7, 0.9, 1.5, -0.8), (0.0, 1.0, 0.4, 0.5, 0.3),
         (0.0, 0.9, 0.0, 1.3, -0.95), (0.8, 2.5, -0.2, 0.4, 0.97), (0.5, 1.0, 0.7, 0.8, 0.4),
         (-0.6, 1.1, -0.3, 0.9, -0.5), (0.4, 1.0, 0.0, 0.8, 0.5), (2.5, 0.3, -3.0, 0.6, 0.2)]
# (b1, s1, b2, s2, ρ): biases of opposite and of the same sign, zero biases (one or both), large |b/s|


@pytest.mark.parametrize("act", ["relu", "erf"])
@pytest.mark.parametrize("pair", PAIRS)
def test_pair_moments_match_two_dimensional_quadrature(act, pair):
    b1, s1, b2, s2, rho = pair
    c = rho * s1 * s2
    got = pair_moments(act, np.array([b1]), np.array([s1]), np.array([b2]), np.array([s2]), np.array([c]))[0]
    assert got == pytest.approx(_oracle(act, b1, s1, b2, s2, c), rel=1e-13, abs=1e-15)


def test_zero_bias_pair_moments_are_the_classical_kernels():
    """Arc-cosine kernel ``s1 s2 (sin θ + (π − θ) cos θ)/(2π)`` (ReLU) and arcsine kernel
    ``(2/π) arcsin(2c/sqrt((1 + 2s1²)(1 + 2s2²)))`` (erf) at zero bias, over ρ ∈ [−1, 1]."""
    rng = np.random.default_rng(3)
    s1, s2 = np.exp(rng.normal(size=200)), np.exp(rng.normal(size=200))
    rho = np.concatenate([rng.uniform(-1, 1, 196), [-1.0, 1.0, 1 - 1e-12, -1 + 1e-12]])
    c, zero = rho * s1 * s2, np.zeros(200)
    theta = np.arccos(rho)
    arccos = s1 * s2 * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2 * np.pi)
    np.testing.assert_allclose(pair_moments("relu", zero, s1, zero, s2, c), arccos, rtol=1e-12, atol=1e-15)
    arcsin = (2 / np.pi) * np.arcsin(2 * c / np.sqrt((1 + 2 * s1**2) * (1 + 2 * s2**2)))
    np.testing.assert_allclose(pair_moments("erf", zero, s1, zero, s2, c), arcsin, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("act", ["relu", "erf"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_parallel_neurons_are_the_one_dimensional_limit_and_continuous(act, sign):
    """At ρ = ±1 (a neuron with itself, or one that has not moved from its initial copy) the moment is the 1-D
    integral ``E[σ(b1 + s1 ξ) σ(b2 ± s2 ξ)]`` (mpmath), and ρ = ±(1 − 1e-12) is within 1e-11 of it."""
    b1, s1, b2, s2 = 0.3, 1.2, -0.1, 0.9
    f = {"relu": lambda u: max(u, 0), "erf": mp.erf}[act]
    cuts = sorted({-b1 / s1, -sign * b2 / s2}) if act == "relu" else [0]
    ref = float(mp.quad(lambda x: f(b1 + s1 * x) * f(b2 + sign * s2 * x) * mp.npdf(x), [-mp.inf, *cuts, mp.inf]))
    args = [np.array([v]) for v in (b1, s1, b2, s2)]
    at = pair_moments(act, *args[:4], np.array([sign * s1 * s2]))[0]
    near = pair_moments(act, *args[:4], np.array([sign * (1 - 1e-12) * s1 * s2]))[0]
    assert at == pytest.approx(ref, rel=1e-12, abs=1e-15)
    assert abs(near - ref) < 1e-11


def test_nearly_parallel_relu_pairs_keep_their_digits():
    """A trained neuron beside its initial copy: ρ = 1 − δ with equal standardised biases (h = k, not dyadic). Given
    ``1 − ρ`` without cancellation, the moment matches the 30-digit oracle to 1e-13 relative for δ down to 1e-13."""
    b, s1, s2 = 0.3137, 1.1, 0.9
    for delta in (1e-4, 1e-7, 1e-10, 1e-13):
        rho = mp.mpf(1) - mp.mpf(delta)
        c = float(rho * s1 * s2)
        got = pair_moments("relu", np.array([b * s1]), np.array([s1]), np.array([b * s2]), np.array([s2]),
                           np.array([c]), one_minus=np.array([delta]), one_plus=np.array([2 - delta]))[0]
        mp.mp.dps = 40
        tau = s2 * mp.sqrt(1 - rho**2)
        ref = float(mp.quad(lambda x: max(b * s1 + s1 * x, 0) * (lambda mu: mu * mp.ncdf(mu / tau) + tau * mp.npdf(
            mu / tau))(b * s2 + s2 * rho * x) * mp.npdf(x), [-mp.inf, -b, mp.inf]))
        assert got == pytest.approx(ref, rel=1e-13), delta


@pytest.mark.parametrize(("act", "order"), [("relu", 1), ("relu", 3), ("relu", 25), ("erf", 1), ("erf", 3),
                                             ("erf", 8)])
def test_overlap_matches_one_dimensional_quadrature(act, order):
    """``E[f h_n(z)]`` of one neuron on d = 1 against mpmath: Stein's lemma's ``m_n ŵ^n/sqrt(n!)`` with its
    normalisation, up to order 25 (whose ``n!`` overflows 64-bit integers)."""
    w, b = 1.5, 0.4
    target = parse_target(f"h{order}(z0)" if order > 1 else "z0", 1)
    got = population_loss(act, np.array([1.0]), np.array([[w]]), np.array([b]), target).overlap
    mp.mp.dps = 30
    f = {"relu": lambda u: max(u, 0), "erf": mp.erf}[act]
    h = lambda z: mp.hermite(order, z / mp.sqrt(2)) / mp.sqrt(2) ** order / mp.sqrt(mp.factorial(order))  # noqa: E731
    ref = mp.quad(lambda z: f(w * z + b) * h(z) * mp.npdf(z), [-mp.inf, -b / w, mp.inf])
    assert got == pytest.approx(float(ref), rel=1e-9, abs=1e-14)


def test_overlap_of_a_two_direction_mode_matches_quadrature():
    """``E[erf(ŵ·z + b) h_2(z_0) z_1]`` on d = 2 against two-dimensional adaptive quadrature (SciPy)."""
    from scipy import integrate, special

    w, b = np.array([0.9, -0.7]), 0.3
    got = population_loss("erf", np.array([1.0]), w[None, :], np.array([b]), parse_target("h2(z0)*z1", 2)).overlap
    ref, err = integrate.dblquad(lambda y, x: special.erf(w[0] * x + w[1] * y + b) * (x * x - 1) / math.sqrt(2) * y
                                 * np.exp(-(x * x + y * y) / 2) / (2 * np.pi), -12, 12, -12, 12, epsabs=1e-12)
    assert err < 1e-8 and got == pytest.approx(ref, rel=1e-7, abs=10 * err)


def test_nearly_lazy_network_keeps_its_small_loss():
    """Trained neurons 1e-4 away from their initial copies (N = 50, c = 1/(γN) with γ = 0.05): ``E[f²]`` is a small
    difference of large pair sums, and must still match Monte Carlo of ``f²`` itself (4 s.e., 2·10⁶ samples)."""
    rng = np.random.default_rng(11)
    n, d = 50, 3
    a0, w0, b0 = rng.normal(size=n), rng.normal(size=(n, d)), 0.5 * rng.normal(size=n)
    a, w, b = a0 + 1e-4 * rng.normal(size=n), w0 + 1e-4 * rng.normal(size=(n, d)), b0 + 1e-4 * rng.normal(size=n)
    g = np.array([1.0, 0.5, 0.25])
    c = 1 / (0.05 * n)
    target = parse_target("z0*z1", d)
    for act in ("relu", "erf"):
        exact = population_loss(act, *centred_neurons(a, w, b, a0, w0, b0, c, g), target)
        sigma = get_activation(act).numpy()
        batches = []
        for _ in range(20):
            x = rng.normal(size=(100_000, d)) * np.sqrt(g)
            f = c * (sigma(x @ w.T + b) @ a - sigma(x @ w0.T + b0) @ a0)
            batches.append(np.mean(f * f))
        mean, se = np.mean(batches), np.std(batches, ddof=1) / math.sqrt(len(batches))
        assert abs(exact.network_sq - mean) < 4 * se and se < 0.05 * mean, (act, exact.network_sq, mean, se)


@pytest.mark.parametrize("act", ["relu", "erf"])
@pytest.mark.parametrize("expr", ["h2(z0)*z1", "z0 + h3(z1)", "z0*z1*z2"])
def test_population_loss_matches_monte_carlo(act, expr):
    """A random 40-neuron network on d = 4 against 2·10⁶ Gaussian samples: within 4 standard errors (the error bar
    from 20 independent batches), the loss and the overlap ``E[f f*]`` each (the network is given readouts along the
    target so that the overlap is well above its error bar)."""
    rng = np.random.default_rng(zlib.crc32(f"{act}|{expr}".encode()))
    d, n = 4, 40
    target = parse_target(expr, d)
    W, b = 0.8 * rng.normal(size=(n, d)), 0.5 * rng.normal(size=n)
    sigma = get_activation(act).numpy()
    z = rng.normal(size=(50_000, d))   # readouts: the least-squares fit of f* by these neurons (a large overlap)
    a = np.linalg.lstsq(sigma(z @ W.T + b), target.evaluate(z), rcond=None)[0]
    exact = population_loss(act, a, W, b, target)
    losses, overlaps = [], []
    for _ in range(20):
        z = rng.normal(size=(100_000, d))
        f, y = sigma(z @ W.T + b) @ a, target.evaluate(z)
        losses.append(0.5 * np.mean((f - y) ** 2))
        overlaps.append(np.mean(f * y))
    for value, batches in ((exact.loss, losses), (exact.overlap, overlaps)):
        mean, se = np.mean(batches), np.std(batches, ddof=1) / math.sqrt(len(batches))
        assert abs(value - mean) < 4 * se, (value, mean, se)
    assert abs(exact.overlap) > 20 * np.std(overlaps, ddof=1) / math.sqrt(20)
    assert exact.target_sq == pytest.approx(float(np.sum(target.coefficients ** 2)))
    assert exact.loss == pytest.approx(0.5 * (exact.network_sq - 2 * exact.overlap + exact.target_sq))


def test_centred_network_at_init_has_the_target_norm_as_loss():
    """Trained neurons equal to their initial copies: ``f = 0``, so ``L = ½Σv²`` to round-off (every pair of a
    neuron with its copy takes the ρ = 1 branch)."""
    rng = np.random.default_rng(0)
    a, w, b = rng.normal(size=64), rng.normal(size=(64, 5)), 0.5 * rng.normal(size=64)
    g = 1.0 / np.arange(1, 6) ** 1.5
    target = parse_target("h2(z0)*z1 + 0.5*z2", 5)
    for act in ("relu", "erf"):
        loss = population_loss(act, *centred_neurons(a, w, b, a, w, b, 1 / (0.5 * 64), g), target)
        assert abs(loss.network_sq) < 1e-13 and abs(loss.overlap) < 1e-13
        assert loss.ratio == pytest.approx(1.0, abs=1e-12)


def test_bad_input_is_one_line_error(monkeypatch):
    target = parse_target("z0*z1", 3)
    a, W, b = np.ones(4), np.ones((4, 3)), np.zeros(4)
    assert not has_exact_population_loss("tanh") and has_exact_population_loss("max(u, 0)")
    with pytest.raises(PopulationError, match="relu and erf only, not tanh.*n_test"):
        population_loss("tanh", a, W, b, target)
    with pytest.raises(PopulationError, match="3 input dimensions|has 3"):
        population_loss("relu", a, np.ones((4, 2)), b, target)
    with pytest.raises(PopulationError, match="shapes"):
        population_loss("relu", a[:3], W, b, target)
    with pytest.raises(PopulationError, match="not finite"):
        population_loss("relu", a * np.nan, W, b, target)
    monkeypatch.setattr(population, "_RULES", (2, 3))   # far too few nodes: the quadrature is refused, not trusted
    with pytest.raises(PopulationError, match="did not converge"):
        population_loss("erf", a, 3 * np.random.default_rng(1).normal(size=(4, 3)), b + 1.0, target)


def _network(params: dict, g: np.ndarray, z: torch.Tensor, c: float) -> torch.Tensor:
    """The centred meanfield network written out again (theory §3), for the checkpoint test."""
    x = z * torch.tensor(np.sqrt(g))
    p = {k: v[0].double() for k, v in params.items()}
    live = torch.relu(x @ p["w"].T + p["b"]) @ p["a"]
    init = torch.relu(x @ p["w0"].T + p["b0"]) @ p["a0"]
    return c * (live - init)


def test_simulator_records_the_exact_loss_of_the_trained_network(tmp_path):
    """``[training] exact_loss``: the recorded ``loss_exact`` starts at ``½Σv²``; at the end it is the loss of the
    checkpointed network on 4·10⁵ fresh samples within 4 standard errors; the test-set loss and its crossing
    times are unchanged by asking for it."""
    base = dict(t_max=6.0, n_test=4000, checkpoint_every=10**6, dtype="float64")
    cfg = small_cfg("z0*z1 + 0.5*h2(z2)", dim=5, width=64, **base, exact_loss=True)
    tr = simulate_config(cfg, out_dir=tmp_path / "exact", progress=False)
    plain = simulate_config(small_cfg("z0*z1 + 0.5*h2(z2)", dim=5, width=64, **base), progress=False)
    np.testing.assert_array_equal(tr.loss, plain.loss)
    assert "loss_exact" not in plain.arrays and tr.meta["digest"] != plain.meta["digest"]
    target = cfg.target_obj()
    half_norm = 0.5 * float(np.sum(np.square(target.coefficients)))
    assert tr.arrays["loss_exact"][0] == pytest.approx(half_norm, rel=1e-12)
    assert tr.arrays["loss_exact"][-1] < 0.9 * half_norm          # it learned something: the check below bites
    params = torch.load(tmp_path / "exact" / "checkpoint.pt", weights_only=False)["params"]
    g = cfg.spectrum().g
    gen = torch.Generator().manual_seed(7)
    batches = []
    for _ in range(20):
        z = torch.randn(20_000, g.size, generator=gen, dtype=torch.float64)
        f = _network(params, g, z, 1 / (0.5 * 64))
        batches.append(float(0.5 * ((f - target.evaluate(z)) ** 2).mean()))
    mean, se = np.mean(batches), np.std(batches, ddof=1) / math.sqrt(len(batches))
    assert abs(tr.arrays["loss_exact"][-1] - mean) < 4 * se, (tr.arrays["loss_exact"][-1], mean, se)
    assert tr.arrays["loss_exact_ratio"] == pytest.approx(tr.arrays["loss_exact"] / half_norm)
    back = Trajectory.load(tmp_path / "exact")          # what compare and the sweeps read again
    np.testing.assert_array_equal(back.arrays["loss_exact"], tr.arrays["loss_exact"])
    assert back.meta["t50_exact"] == tr.meta["t50_exact"]


def test_stop_loss_reads_the_exact_loss_when_it_is_recorded():
    """With ``exact_loss``, ``stop_loss`` ends the run at the first measurement whose exact ``L/L(0)`` is at or below
    it, not the test set's: a 200-point test set (noisy on purpose) and a level where the two curves first cross at
    different measurements, taken from a full run of the same network; the stopped run is that run's prefix."""
    base = dict(t_max=6.0, n_test=200, n_points=40, checkpoint_every=0, dtype="float64", exact_loss=True)
    full = simulate_config(small_cfg("z0*z1 + 0.5*h2(z2)", dim=5, width=64, **base), progress=False)
    exact, test = full.arrays["loss_exact_ratio"], np.asarray(full.loss) / full.loss[0]

    def first(curve, level):
        below = np.flatnonzero(curve[1:] <= level)
        return 1 + int(below[0]) if below.size else None
    levels = [x for x in np.linspace(0.3, 0.95, 27)
              if first(exact, x) is not None and first(exact, x) != first(test, x)]
    assert levels, "the test set should disagree with the exact loss somewhere"
    level = float(levels[0])
    stopped = simulate_config(small_cfg("z0*z1 + 0.5*h2(z2)", dim=5, width=64, **base, stop_loss=level),
                              progress=False)
    k = first(exact, level)
    assert len(stopped.t) == k + 1 and stopped.status.complete
    np.testing.assert_allclose(stopped.arrays["loss_exact_ratio"], exact[:k + 1], rtol=1e-12)


def test_exact_loss_for_an_activation_without_pair_moments_is_refused():
    cfg = small_cfg(exact_loss=True).replace(network={"activation": "tanh"})
    with pytest.raises(MLPError, match="exact_loss needs closed-form pair moments.*tanh.*n_test"):
        simulate_config(cfg, progress=False)


def _smoothed_mean(act: str, u, p):
    """``E_ε[σ(u + p ε)]`` in closed form (mpmath): ``uΦ(u/p) + pφ(u/p)`` for relu, ``erf(u/sqrt(1 + 2p²))`` for erf."""
    if p == 0:
        return max(u, 0) if act == "relu" else mp.erf(u)
    if act == "relu":
        return u * mp.ncdf(u / p) + p * mp.npdf(u / p)
    return mp.erf(u / mp.sqrt(1 + 2 * p * p))


@pytest.mark.parametrize("act", ["relu", "erf"])
def test_smoothed_square_matches_quadrature_of_its_definition(act):
    """``E_z[(Σ_k c_k E_ε[σ(ŵ_k z + b_k + p_k ε_k)])²]`` on one input direction by 30-digit mpmath quadrature of the
    definition (the smoothed means in closed form, no pair moment): neurons of both signs of ŵ, one with p = 0 (a
    sharp ridge), one nearly unsmoothed, a pair that differs only in p (the trained and initial copies of a neuron
    that moved only outside T) and a nearly lazy pair (copies 1e-3 apart, coefficients ±200 as at γ = 1/200)."""
    c = np.array([0.7, -1.3, 0.4, 2.0, -2.0, 0.9, 200.0, -200.0])
    w = np.array([[0.8], [-0.5], [1.2], [0.6], [0.6], [1.3], [0.7], [0.7 + 1e-3]])
    b = np.array([0.2, -0.4, 0.0, 0.5, 0.5, -1.0, 0.1, 0.1])
    p = np.array([0.5, 1.1, 0.0, 0.3, 0.9, 0.02, 0.4, 0.4])
    mp.mp.dps = 30
    cuts = sorted({float(-bk / wk) for bk, wk, pk in zip(b, w[:, 0], p) if pk < 0.05})

    def F(z):
        return sum(mp.mpf(ck) * _smoothed_mean(act, mp.mpf(wk) * z + mp.mpf(bk), mp.mpf(pk))
                   for ck, (wk,), bk, pk in zip(c, w, b, p))
    oracle = float(mp.quad(lambda z: F(z) ** 2 * mp.npdf(z), [-mp.inf, *cuts, mp.inf]))
    got = population.smoothed_square(act, c, w, b, p)
    assert got == pytest.approx(oracle, rel=1e-9, abs=1e-9)
    # p = 0 everywhere and a single copy per neuron: the population loss' E[f²] (the same pair moments, ρ = 1 on
    # the diagonal), here against the definition again
    keep = slice(0, 4)
    plain = population.smoothed_square(act, c[keep], w[keep], b[keep], np.zeros(4))
    cuts0 = sorted({float(-bk / wk) for bk, wk in zip(b[keep], w[keep, 0])})

    def F0(z):
        return sum(mp.mpf(ck) * _smoothed_mean(act, mp.mpf(wk) * z + mp.mpf(bk), 0)
                   for ck, (wk,), bk in zip(c[keep], w[keep], b[keep]))
    assert plain == pytest.approx(float(mp.quad(lambda z: F0(z) ** 2 * mp.npdf(z), [-mp.inf, *cuts0, mp.inf])),
                                  rel=1e-9)


def test_smoothed_square_in_two_directions_matches_a_product_rule():
    """Two input directions (covariances between neurons, not only products of scales): against a 120²-point
    Gauss–Hermite rule of the definition, all neurons smoothed (p ≥ 0.4, so the rule converges)."""
    rng = np.random.default_rng(3)
    n = 6
    c, w, b, p = rng.normal(size=n), rng.normal(size=(n, 2)), 0.5 * rng.normal(size=n), 0.4 + rng.random(n)
    x, wq = np.polynomial.hermite_e.hermegauss(120)
    wq = wq / wq.sum()
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W2 = np.outer(wq, wq).ravel()
    for act in ("relu", "erf"):
        U = Z @ w.T + b
        if act == "relu":
            from scipy.stats import norm
            M = U * norm.cdf(U / p) + p * norm.pdf(U / p)
        else:
            from scipy.special import erf
            M = erf(U / np.sqrt(1 + 2 * p * p))
        assert population.smoothed_square(act, c, w, b, p) == pytest.approx(float(W2 @ (M @ c) ** 2), rel=1e-9)


def test_smoothed_square_bad_input_is_one_line_error():
    with pytest.raises(PopulationError, match="perp ≥ 0"):
        population.smoothed_square("relu", np.ones(2), np.ones((2, 1)), np.zeros(2), np.array([0.1, -0.1]))
    with pytest.raises(PopulationError, match="constant unit"):
        population.smoothed_square("relu", np.ones(2), np.zeros((2, 1)), np.zeros(2), np.zeros(2))
    with pytest.raises(PopulationError, match="relu and erf only"):
        population.smoothed_square("tanh", np.ones(2), np.ones((2, 1)), np.zeros(2), np.ones(2))
    for rows in (-1, 3, 1.5):
        with pytest.raises(PopulationError, match=r"must be an integer in 0\.\.2"):
            population.smoothed_square("relu", np.ones(2), np.ones((2, 1)), np.zeros(2), np.ones(2), rows=rows)


def test_smoothed_square_of_the_first_rows_is_the_total_less_the_rest():
    """``rows = r`` sums the pairs with a neuron among the first r: the total less the square of the rest, both
    against a double loop of single pair moments (no blocks, no triangle), with perp > 0."""
    rng = np.random.default_rng(7)
    n = 5
    c, W, b, p = rng.normal(size=2 * n), rng.normal(size=(2 * n, 3)), rng.normal(size=2 * n), 0.2 + rng.random(2 * n)
    s = np.sqrt((W**2).sum(1) + p * p)
    M = np.array([[float(pair_moments("relu", b[i], s[i], b[j], s[j], W[i] @ W[j])) for j in range(2 * n)]
                  for i in range(2 * n)])
    assert population.smoothed_square("relu", c, W, b, p) == pytest.approx(c @ M @ c, rel=1e-12)
    assert population.smoothed_square("relu", c, W, b, p, rows=n) == pytest.approx(
        c @ M @ c - c[n:] @ M[n:, n:] @ c[n:], rel=1e-12)
