"""Per-group learning rates ``[training] lr_scale = {a, w, b}`` (issue 20, item 6): the parametrization seam.

Every check is against an independent computation: a Monte Carlo eNTK of sampled finite networks by torch autograd
(with error bars), autograd SGD, closed forms of the per-neuron flow of a linear network, and the plain-SGD code
paths (the default must not change)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from featureode.config import ConfigError, config_from_dict, load_config
from featureode.export.latex import derive_document
from featureode.kernel import theory as kernel
from featureode.kernel.parametrization import GroupRates, ParametrizationError, get_parametrization
from featureode.ode.solve import closure_prefactors, second_order_of, system_inputs
from featureode.ode.variants import Variant
from featureode.sim.mlp import RunSpec, Simulation
from featureode.workflow.runs import same_config


def _cfg(expr: str = "z0 + z0*z1", dim: int = 4, lr_scale: dict | None = None, activation: str = "relu",
         richness: float = 0.5, **training) -> "object":
    tr = {"batch": 600, "t_max": 20.0, "seed": 0, "n_test": 2000, "n_points": 12, "t_min": 0.5, "compile": False,
          "ntk_probe": 64, "ntk_every": 10, "checkpoint_every": 0, "device": "cpu", **training}
    if lr_scale is not None:
        tr["lr_scale"] = lr_scale
    return config_from_dict({"data": {"dim": dim}, "target": {"expr": expr},
                             "network": {"width": 64, "richness": richness, "bias_std": 0.5,
                                         "activation": activation},
                             "training": tr, "ode": {"variants": ["lazy", "displacement"]}})


# ----------------------------------------------------------------------------------------------------------------
# the config key and the digest
# ----------------------------------------------------------------------------------------------------------------
def test_lr_scale_key_defaults_to_plain_sgd_and_stays_out_of_the_digest():
    base = load_config(None)
    assert base.training.lr_scale == {"a": 1.0, "w": 1.0, "b": 1.0}
    same = base.replace(training={"lr_scale": {"w": 1}})
    assert same.digest() == base.digest() and same.training.lr_scale == base.training.lr_scale
    frozen = base.replace(training={"lr_scale": {"a": 0}})
    assert frozen.training.lr_scale == {"a": 0.0, "w": 1.0, "b": 1.0} and frozen.digest() != base.digest()
    # a stamp written before the key existed (no lr_scale in its config) is the default config's
    old = base.to_dict()
    del old["training"]["lr_scale"]
    assert same_config({"digest": "stale", "config": old}, base)
    assert not same_config({"digest": "stale", "config": old}, frozen)


@pytest.mark.parametrize("bad, words", [({"x": 1}, "unknown group 'x'"), ({"A": 2}, "did you mean 'a'"),
                                        ({"a": -1}, "lr_scale a must be ≥ 0"), ({"w": "1"}, "a string"),
                                        ({"a": math.nan}, "finite"), ({"a": 0, "w": 0, "b": 0}, "nothing would train"),
                                        (2.0, "must be a table")])
def test_bad_lr_scale_is_refused_with_one_line(bad, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None).replace(training={"lr_scale": bad})


@pytest.mark.parametrize("table", [{"x": 1}, {"a": -1}, {"a": 0, "w": 0, "b": 0}, {"w": math.inf}])
def test_group_rates_refuse_what_the_config_refuses(table):
    with pytest.raises(ParametrizationError):
        GroupRates.of(table)


# ----------------------------------------------------------------------------------------------------------------
# the kernel at init: λ = η_a readout + η_w weights + η_b bias
# ----------------------------------------------------------------------------------------------------------------
def _mc_entk(cfg, modes, rates: GroupRates, groups: int = 16, neurons: int = 256, n: int = 4096,
             seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """``λ_β = Σ_g η_g E_{x,x'}[h_β ∇_g f(x)·∇_g f(x') h_β]`` of sampled finite networks at init: per independent
    group of ``neurons`` neurons and ``n`` fresh samples, the U-statistic of the autograd per-sample gradients of
    ``f = Σ_k a_k σ(w_k·x + b_k)/sqrt(K)`` (the meanfield NTK's normalisation ``q c² = 1/K``); mean and standard
    error over the groups."""
    from featureode.calculus.activations import get_activation

    gen = torch.Generator().manual_seed(seed)
    spectrum = cfg.spectrum()
    act = get_activation(cfg.network.activation).torch()
    d, sb = spectrum.dim, cfg.network.bias_std
    est = []
    for _ in range(groups):
        theta = {"a": torch.randn(neurons, generator=gen, dtype=torch.float64),
                 "w": torch.randn(neurons, d, generator=gen, dtype=torch.float64),
                 "b": sb * torch.randn(neurons, generator=gen, dtype=torch.float64)}
        z = torch.randn(n, d, generator=gen, dtype=torch.float64)
        x = spectrum.to_x(z)

        def f(th, xs):
            return (th["a"] * act(th["w"] @ xs + th["b"])).sum() / math.sqrt(neurons)

        jac = torch.func.vmap(torch.func.grad(f), in_dims=(None, 0))(theta, x)
        row = []
        for m in modes:
            h = m.evaluate(z)
            lam = 0.0
            for k in ("a", "w", "b"):
                g = h[:, None] * jac[k].reshape(n, -1)
                lam += rates.of_part(k) * float((g.sum(0) @ g.sum(0) - (g * g).sum()) / (n * (n - 1)))
            row.append(lam)
        est.append(row)
    est = np.array(est)
    return est.mean(0), est.std(0, ddof=1) / math.sqrt(groups)


@pytest.mark.parametrize("table", [{"a": 4.0, "w": 1.0, "b": 0.5}, {"a": 0.0, "w": 1.0, "b": 1.0}])
def test_kernel_lambda_with_lr_scale_matches_monte_carlo_entk_of_sampled_networks(table):
    """The exact λ_β(0) of the weighted kernel agrees with the autograd eNTK of sampled finite networks within 4
    standard errors on z0, z0*z1 and h2(z0); the unweighted λ does not (so the check can fail)."""
    cfg = _cfg("z0 + z0*z1 + h2(z0)", lr_scale=table)
    theory = kernel.kernel_theory(cfg)
    plain = kernel.kernel_theory(cfg.replace(training={"lr_scale": {"a": 1, "w": 1, "b": 1}}))
    assert theory.parametrization.rates == GroupRates(**table)
    mean, se = _mc_entk(cfg, theory.modes, theory.parametrization.rates)
    np.testing.assert_array_less(np.abs(theory.lambda_exact - mean), 4 * se + 1e-12)
    assert np.any(np.abs(plain.lambda_exact - mean) > 8 * se)
    # the Gram parts are the weighted parts and sum to the Gram, whose diagonal is λ
    with_gram = kernel.kernel_theory(cfg, with_gram=True)
    parts = kernel.kernel_theory(cfg.replace(training={"lr_scale": {}}), with_gram=True).gram_parts
    for part, eta in zip(("readout", "weights", "bias"), theory.parametrization.part_weights()):
        np.testing.assert_allclose(with_gram.gram_parts[part], eta * parts[part], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.diag(with_gram.gram), theory.lambda_exact, rtol=1e-12)


def test_linear_network_kernel_and_closure_constants_have_their_closed_forms():
    """For σ(u) = u and the mode z0 the per-neuron flow is linear and exact: ``A = ŵ_0``, so
    ``λ(0) = (η_a + η_w) g_0`` (the bias part vanishes), ``Λ_1 = η_a + η_w``; the first-layer displacement
    ``Δŵ_0 = γ η_w g_0 a D`` gives ``r_0 − 1 = γ² η_w² g_0 D²`` (displacement: ``q_w c_1 g_0``), the readout
    displacement ``Δa = γ η_a ŵ_0 D`` gives ``⟨a²⟩ − 1 = γ² η_a² g_0 D²`` (scale: ``q_a c_1 g_0``), the derived
    ``κ = γ² η_w² / (η_a + η_w)²``, and solving the coupled flow to second order
    ``λ(D) = λ(0) (1 + 2 γ² η_a η_w g_0 D² + …)``, i.e. ``S = 2 η_a η_w g_0`` (Monte Carlo, within 5 s.e.)."""
    gamma = 0.3
    for ea, ew, eb in ((4.0, 1.0, 1.0), (0.0, 2.0, 0.5), (1.0, 1.0, 1.0)):
        cfg = _cfg("z0", lr_scale={"a": ea, "w": ew, "b": eb}, activation="linear", richness=gamma)
        th = kernel.kernel_theory(cfg)
        g0 = float(th.g[0])
        assert th.lambda_exact[0] == pytest.approx((ea + ew) * g0, rel=1e-9)
        assert th.lambda_hea[0] == pytest.approx((ea + ew) * g0, rel=1e-9)
        assert th.level_coefficients[1] == pytest.approx(ea + ew, rel=1e-9)
        assert th.kappa == pytest.approx(gamma**2 * ew**2 / (ea + ew) ** 2, rel=1e-9)
        for name, scale, expect in (("displacement", False, gamma**2 * ew**2 * g0),
                                    ("lazy", True, gamma**2 * ea**2 * g0)):
            inputs, system = system_inputs(th, Variant(name, scale=scale))
            val = dict(zip(system.inputs, inputs))
            key = "q_a" if scale else "q_w"
            assert val[key] * val["c"][0] * val["gpow"][0] == pytest.approx(expect, rel=1e-9)
        so = second_order_of(th)[1]
        # the module's central differences (step 1e-3) leave an O(1e-6) relative error; its Monte Carlo error is ~0
        assert abs(so.S[0, 0] - 2 * ea * ew * g0) <= 5 * so.S_stderr[0, 0] + 1e-5 * max(2 * ea * ew * g0, 1e-3)


# ----------------------------------------------------------------------------------------------------------------
# the simulator: the step per group and the eNTK measurement
# ----------------------------------------------------------------------------------------------------------------
def _sim(cfgs, modes=None, batched=False) -> Simulation:
    return Simulation([RunSpec.build(c, modes) for c in cfgs], None, progress=False, batched=batched)


@pytest.mark.parametrize("batched", [False, True])
def test_sgd_step_per_group_is_autograd_sgd_with_the_groups_rates(batched):
    """Each group moves by ``−η γ² N η_g ∂L/∂θ_g`` (autograd), for two runs with different rates in one batch; a
    group with rate 0 is left bit for bit as it was."""
    cfgs = [_cfg("staircase(2)", dim=6, lr_scale={"a": 0, "w": 1, "b": 1}, dtype="float64", richness=0.3),
            _cfg("staircase(2)", dim=6, lr_scale={"a": 4, "w": 0.5, "b": 2}, dtype="float64", richness=0.05,
                 seed=3)]
    sim = _sim(cfgs, batched=batched)
    net = sim.net
    gen = torch.Generator().manual_seed(1)
    for k in ("w", "b", "a"):
        net.params[k].add_(0.1 * torch.randn(net.params[k].shape, generator=gen, dtype=torch.float64))
    x, y = sim._sample([0, 1])
    eta = [0.7, 0.2]
    before = {k: v.clone() for k, v in net.params.items()}
    net.step(x, y, eta, [0, 1])
    for r, rates in enumerate(({"a": 0, "w": 1, "b": 1}, {"a": 4, "w": 0.5, "b": 2})):
        theta = {k: before[k][r].clone().requires_grad_() for k in ("w", "b", "a")}
        u, u0 = x[r] @ theta["w"].T + theta["b"], x[r] @ before["w0"][r].T + before["b0"][r]
        gamma, width = float(net.gamma[r]), net.width
        f = (net.act(u) @ theta["a"] - net.act(u0) @ before["a0"][r]) / (gamma * width)
        grads = torch.autograd.grad(0.5 * ((f - y[r]) ** 2).mean(), list(theta.values()))
        for (k, p), gr in zip(theta.items(), grads):
            expect = p.detach() - eta[r] * gamma**2 * width * rates[k] * gr
            torch.testing.assert_close(net.params[k][r], expect, rtol=1e-10, atol=1e-12)
    assert torch.equal(net.params["a"][0], before["a"][0])


def test_frozen_readout_stays_bit_for_bit_at_its_initial_value_while_the_first_layer_learns():
    """``lr_scale = {a = 0}``: after a float32 training run the readout equals its initial draw exactly; the first
    layer and the loss moved."""
    cfg = _cfg("z0", dim=4, lr_scale={"a": 0}, t_max=5.0, n_points=6, richness=0.5)
    sim = _sim([cfg])
    sim.run()
    traj = sim.trajectory(0)
    p = sim.net.params
    assert torch.equal(p["a"][0], p["a0"][0])
    assert not torch.equal(p["w"][0], p["w0"][0])
    assert traj.loss[-1] < 0.9 * traj.loss[0]
    np.testing.assert_allclose(traj.arrays["a2"], 1.0, rtol=0, atol=0)


def test_measured_entk_parts_gram_and_ntk_top_are_weighted_by_the_groups_rates():
    """Each measured part equals ``η_g`` × the U-statistic of that group's autograd gradients, λ and the Gram are
    the weighted sums, and λ_top is the top eigenvalue of ``(q/P) Σ_g η_g J_g J_gᵀ``."""
    rates = {"a": 4.0, "w": 0.5, "b": 2.0}
    cfg = _cfg("z0 + z1*z2", dim=4, lr_scale=rates, n_test=300, dtype="float64", richness=0.3)
    sim = _sim([cfg], modes=["1", "h2(z0)"])
    net, test, spec = sim.net, sim.tests[0], sim.specs[0]
    gen = torch.Generator().manual_seed(2)
    for k in ("w", "b", "a"):
        net.params[k].add_(0.3 * torch.randn(net.params[k].shape, generator=gen, dtype=torch.float64))
    meas = net.measure(0, test, spec.support)
    x, h, n = test.x[:test.n], test.h[:test.n], test.n
    p = {k: v[0] for k, v in net.params.items()}
    gamma, width = float(net.gamma[0]), net.width

    def f_single(th, xs):
        return (th["a"] * net.act(th["w"] @ xs + th["b"])).sum() / (gamma * width)

    theta = {k: p[k] for k in ("a", "w", "b")}
    jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, x)
    jac = {k: jac[k].reshape(n, -1) * math.sqrt(gamma**2 * width) for k in theta}

    def u_stat(ga, gb):
        return float((ga.sum(0) @ gb.sum(0) - (ga * gb).sum()) / (n * (n - 1)))

    for col in range(h.shape[1]):
        parts = [rates[k] * u_stat(h[:, col, None] * jac[k], h[:, col, None] * jac[k]) for k in ("a", "w", "b")]
        np.testing.assert_allclose(meas.parts[:, col], parts, rtol=1e-9, atol=1e-13)
        assert meas.lam[col] == pytest.approx(sum(parts), rel=1e-9, abs=1e-13)
        for col2 in range(h.shape[1]):
            expect = sum(rates[k] * u_stat(h[:, col, None] * jac[k], h[:, col2, None] * jac[k])
                         for k in ("a", "w", "b"))
            assert meas.gram[col, col2] == pytest.approx(expect, rel=1e-9, abs=1e-13)
    probe = sim.probes[0]
    jp = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, probe)
    gram = sum(rates[k] * (jp[k].reshape(len(probe), -1) @ jp[k].reshape(len(probe), -1).T) for k in theta)
    gram = gram * gamma**2 * width / len(probe)
    assert net.ntk_top(0, probe) == pytest.approx(float(torch.linalg.eigvalsh(gram)[-1]), rel=1e-10)


# ----------------------------------------------------------------------------------------------------------------
# plain SGD is unchanged
# ----------------------------------------------------------------------------------------------------------------
def test_weighted_formulas_with_unit_rates_reduce_to_the_plain_ones():
    """The weighted code paths, forced with rates (1, 1, 1), agree with the plain (default) arithmetic: kernel λ,
    Λ_l, the measurement; and the default theory carries plain meanfield."""
    cfg = _cfg("z0 + z0*z1 + h2(z0)")
    th = kernel.kernel_theory(cfg)
    assert th.parametrization == get_parametrization("meanfield")
    net = th.network
    np.testing.assert_allclose(kernel.network_eigenvalues(net, th.modes, (1.0, 1.0, 1.0)), th.lambda_exact,
                               rtol=1e-13)
    np.testing.assert_allclose(kernel.weighted_level_coefficients(net.activation, net.bias_std, 2, (1.0, 1.0, 1.0)),
                               th.level_coefficients, rtol=1e-12)
    assert closure_prefactors(th) == {"q": 0.25, "q_a": 0.25, "q_w": 0.25}
    sim = _sim([_cfg("z0 + z1*z2", dim=4, n_test=300, dtype="float64")], modes=["h2(z0)"])
    net_, test, spec = sim.net, sim.tests[0], sim.specs[0]
    plain = net_.measure(0, test, spec.support)
    net_.rates = [_ForcedWeights()]  # rates 1 through the weighted path
    weighted = net_.measure(0, test, spec.support)
    for field in ("lam", "parts", "gram", "lam_stderr"):
        np.testing.assert_allclose(getattr(weighted, field), getattr(plain, field), rtol=1e-9, atol=1e-14)


class _ForcedWeights(GroupRates):
    """Rates 1 that do not say so: the weighted code paths at unit weights."""

    @property
    def is_default(self) -> bool:
        return False


# ----------------------------------------------------------------------------------------------------------------
# the exports state the rates
# ----------------------------------------------------------------------------------------------------------------
def test_latex_states_the_rates_only_when_they_are_not_one():
    plain = derive_document(_cfg("z0*z1"))
    frozen = derive_document(_cfg("z0*z1", lr_scale={"a": 0}))
    assert r"\eta_a" not in plain and r"q\,\eta_w^2" not in plain and r"q_{w} = q = 0.25" in plain
    assert r"$\eta_a = 0$" in frozen and r"\texttt{lr\_scale}" in frozen and r"q_{w} = q\,\eta_w^2" in frozen
