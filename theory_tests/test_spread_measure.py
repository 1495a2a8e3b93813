"""The simulator's second moment ``‖Kφ_β‖²`` of the eNTK (featureode.sim.measure.SpreadSums).

Two independent checks: (1) on a small test set, the half-split estimator and every one of its delete-a-group
jackknife replicates equal a brute-force computation from the n × n eNTK matrix built from autograd per-sample
gradients; (2) over independent test sets the estimate is unbiased for the exact ``‖K_Nφ_β‖²`` of the network (exact
per-neuron Gaussian integrals, then one large Monte Carlo over x of one function), and its jackknife standard error
matches the spread of the estimates.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from featureode.calculus.activations import get_activation
from featureode.config import config_from_dict
from featureode.sim.measure import jackknife_groups, make_test_set
from featureode.sim.mlp import CPU_CHUNK, RunSpec, Simulation, stream


def small_cfg(expr="z0 + z1*z2", dim=6, width=48, n_test=300, **training):
    tr = {"batch": 256, "t_max": 5.0, "seed": 0, "n_test": n_test, "n_points": 4, "t_min": 0.5, "compile": False,
          "ntk_probe": 64, "ntk_every": 10, "checkpoint_every": 0, "device": "cpu"}
    tr.update(training)
    return config_from_dict({"data": {"dim": dim}, "target": {"expr": expr},
                             "network": {"width": width, "richness": 0.3, "bias_std": 0.5}, "training": tr})


def _simulation(cfg, modes=()):
    sim = Simulation([RunSpec.build(cfg, list(modes))], None, progress=False)
    sim.net.spread = True
    return sim


def _perturb(net, size, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for k in ("w", "b", "a"):
        p = net.params[k]
        p.add_(size * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p))


def _theta_matrix(net, x):
    """``Θ = q J Jᵀ`` from autograd per-sample gradients of f over all trained parameters."""
    p = {k: v[0] for k, v in net.params.items()}
    gamma, width = float(net.gamma[0]), net.width

    def f_single(th, xs):
        return (th["a"] * net.act(th["w"] @ xs + th["b"])).sum() / (gamma * width)

    theta = {k: p[k] for k in ("a", "w", "b")}
    jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, x)
    j = torch.cat([jac[k].reshape(x.shape[0], -1) for k in theta], 1).double()
    return gamma**2 * width * (j @ j.T)


def _brute_half_split(theta, h, groups_of, keep):
    """mean_p a_p b_p over the kept samples, a/b from the kept samples of even/odd groups other than p."""
    n = int(keep.sum())
    even = keep & (groups_of % 2 == 0)
    odd = keep & (groups_of % 2 == 1)
    out = np.zeros(h.shape[1])
    for col in range(h.shape[1]):
        hv = h[:, col]
        tot = 0.0
        for p in np.flatnonzero(keep):
            sides = []
            for half in (even, odd):
                mask = half.copy()
                mask[p] = False
                sides.append(float(theta[p, mask] @ hv[mask]) / mask.sum())
            tot += sides[0] * sides[1]
        out[col] = tot / n
    return out


def test_half_split_estimator_and_its_jackknife_equal_brute_force():
    cfg = small_cfg(dtype="float64")
    sim = _simulation(cfg, ["h2(z0)"])
    net, test, spec = sim.net, sim.tests[0], sim.specs[0]
    _perturb(net, 0.3)
    # a test set of several chunks, so there are several jackknife groups
    test = make_test_set(spec.spectrum, spec.target, spec.modes, 300, stream(5, "test"), "cpu", torch.float64,
                         chunk=40)
    m = net.measure(0, test, spec.support)
    n, chunk = test.n, test.chunk
    n_chunks = math.ceil(test.x.shape[0] / chunk)
    G = jackknife_groups(n_chunks, test.h.shape[1], net.width, net.dim)
    assert G >= 4
    groups_of = np.array([(p // chunk) * G // n_chunks for p in range(n)])
    theta = _theta_matrix(net, test.x[:n]).numpy()
    h = test.h[:n].double().numpy()
    full = _brute_half_split(theta, h, groups_of, np.ones(n, bool))
    np.testing.assert_allclose(m.second_moment, full, rtol=1e-9)
    left = np.array([_brute_half_split(theta, h, groups_of, groups_of != j) for j in range(G)])
    se = np.sqrt((G - 1) / G * ((left - left.mean(0)) ** 2).sum(0))
    np.testing.assert_allclose(m.second_moment_stderr, se, rtol=1e-8)
    # the spread is a variance: second moment ≥ λ² up to noise, and λ is untouched by the second pass
    net.spread = False
    plain = net.measure(0, test, spec.support)
    np.testing.assert_array_equal(plain.lam, m.lam)
    assert plain.second_moment is None


def _exact_second_moment(net, g, modes, act, n_x=400_000, seed=7):
    """``‖K_Nφ_β‖²`` of the network: exact per-neuron projections, then E_x of the square of
    ``(Kφ)(x) = κ Σ_k (A_k σ_k + a_k² σ'_k (G_k·x + H_k))`` over ``n_x`` fresh samples (with its standard error)."""
    p = {k: v[0].double().numpy() for k, v in net.params.items()}
    w, b, a = p["w"], p["b"], p["a"]
    w_hat = w * np.sqrt(g)
    A_act = get_activation(act)
    s = np.linalg.norm(w_hat, axis=1)
    kappa = net.kappa[0]
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_x, g.size))
    x = z * np.sqrt(g)
    u = x @ w.T + b
    sig = np.maximum(u, 0.0)
    dsig = (u > 0).astype(float)
    out, err = [], []
    for mode in modes:
        mono = np.prod([w_hat[:, i] ** n for i, n in mode.items], axis=0) if mode.items else np.ones(len(b))
        norm = mono / math.sqrt(mode.factorial)
        mk = {o: A_act.mean_numpy(mode.degree + o)(b, s) for o in (0, 1, 2)}
        A, H = norm * mk[0], norm * mk[1]
        G = w_hat * (norm * mk[2])[:, None]
        for i, e in mode.items:
            lower = np.prod([w_hat[:, i2] ** (e2 - (i2 == i)) for i2, e2 in mode.items], axis=0)
            G[:, i] += e * lower * mk[0] / math.sqrt(mode.factorial)
        G = G * np.sqrt(g)            # E[h σ' x_i] = sqrt(g_i) E[h σ' z_i]
        kphi = kappa * (sig @ A + ((dsig * a * a) * (x @ G.T + H)).sum(1))
        sq = kphi**2
        out.append(sq.mean())
        err.append(sq.std() / math.sqrt(n_x))
    return np.array(out), np.array(err)


def test_second_moment_is_unbiased_with_calibrated_jackknife_errors():
    """Over 20 independent test sets (n = 4096, 16 groups) of one network: the mean estimate agrees with the exact
    ``‖K_Nφ_β‖²`` within 4 standard errors of that mean (plus the oracle's own), and the jackknife standard error
    averaged over the sets matches the sd of the estimates within [0.55, 1.7] (the sd of 20 values is known to
    ±16%)."""
    cfg = small_cfg(expr="z0 + z0*z1", width=32, n_test=4096)
    spec = RunSpec.build(cfg, ["h2(z0)", "z0*z1*z2"])
    sim = Simulation([spec], None, progress=False)
    sim.net.spread = True
    _perturb(sim.net, 0.2)
    est, se = [], []
    for seed in range(20):
        test = make_test_set(spec.spectrum, spec.target, spec.modes, 4096, stream(300 + seed, "test"), "cpu",
                             torch.float32, chunk=CPU_CHUNK)
        m = sim.net.measure(0, test, spec.support)
        est.append(m.second_moment)
        se.append(m.second_moment_stderr)
    est, se = np.array(est), np.array(se)
    exact, exact_se = _exact_second_moment(sim.net, spec.spectrum.g, spec.modes, "relu")
    mean_se = est.std(0, ddof=1) / math.sqrt(len(est))
    z = (est.mean(0) - exact) / np.sqrt(mean_se**2 + exact_se**2)
    assert np.all(np.abs(z) < 4), (z, est.mean(0), exact)
    ratio = est.std(0, ddof=1) / se.mean(0)
    assert np.all((0.55 < ratio) & (ratio < 1.7)), ratio


def test_simulation_records_the_second_moment_and_leaves_training_bit_identical():
    """``spread=True`` adds ``lambda_second_moment`` (and its stderr) to the trajectory and mlp.json/npz, and every
    other recorded series is bit-identical to a run without it (the second pass reads the parameters only)."""
    from featureode.sim.mlp import simulate_config

    cfg = small_cfg(expr="z0 + z0*z1", width=32, n_test=1024, t_max=3.0, n_points=3, batch=128)
    plain = simulate_config(cfg, progress=False)
    with_spread = simulate_config(cfg, progress=False, spread=True)
    assert plain.get("lambda_second_moment") is None
    sm = with_spread.get("lambda_second_moment")
    assert sm.shape == with_spread.lam.shape and np.all(np.isfinite(sm))
    assert with_spread.get("lambda_second_moment_stderr").shape == sm.shape
    np.testing.assert_array_equal(plain.loss, with_spread.loss)
    np.testing.assert_array_equal(plain.lam, with_spread.lam)
    np.testing.assert_array_equal(plain.f, with_spread.f)
    np.testing.assert_array_equal(plain.get("gram"), with_spread.get("gram"))
