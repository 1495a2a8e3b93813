"""The MLP simulator (theory §3, §5–6): SGD step, estimators, lazy limit, resume, divergence, batching.

Independent oracle for the estimators: for Gaussian inputs every projection of a neuron is an exact Gaussian integral
(theory §2), ``E_x[h_β(z) F(w·x + b)] = ŵ^β/sqrt(β!) · m^F_{|β|}(b, |ŵ|)``, so the network's exact projections
``f_β`` and exact eNTK Rayleigh quotients ``λ_β`` (no test-set noise) follow from the activation's derivative means.
"""
from __future__ import annotations

import json
import math
import signal

import numpy as np
import pytest
import torch
from scipy import stats

from featureode.kernel import theory as kernel
from featureode.calculus.activations import get_activation
from featureode.config import config_from_dict
from featureode.calculus.hermite import Mode
from featureode.sim.measure import make_test_set
from featureode.results.metrics import crossing_time
from featureode.sim.mlp import (CPU_CHUNK, DivergenceError, MeanFieldBatch, MLPError, RunSpec, Simulation, simulate_batch,
                            simulate_config, stream)


def small_cfg(expr: str = "staircase(2)", dim: int = 6, width: int = 256, richness: float = 0.5, **training):
    tr = {"batch": 512, "t_max": 20.0, "seed": 0, "n_test": 8000, "n_points": 12, "t_min": 0.5, "compile": False,
          "ntk_probe": 128, "ntk_every": 10, "checkpoint_every": 0, "device": "cpu"}
    tr.update(training)
    return config_from_dict({"data": {"dim": dim}, "target": {"expr": expr},
                             "network": {"width": width, "richness": richness, "bias_std": 0.5},
                             "training": tr})


def new_simulation(cfgs, modes=None, batched=None) -> Simulation:
    return Simulation([RunSpec.build(c, modes) for c in cfgs], None, progress=False, batched=batched)


def perturb(net: MeanFieldBatch, size: float, seed: int = 1) -> None:
    """Move the trained parameters away from init (a generic trained-looking network with f ≠ 0)."""
    gen = torch.Generator().manual_seed(seed)
    for k in ("w", "b", "a"):
        p = net.params[k]
        p.add_(size * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p))


# ----------------------------------------------------------------------------------------------------------------
# exact Gaussian integrals of a network (the oracle)
# ----------------------------------------------------------------------------------------------------------------
def _neuron_projection(mode: Mode, w_hat: np.ndarray, b: np.ndarray, order_shift: int, act: str) -> np.ndarray:
    """``E_x[h_β σ^{(order_shift)}(u_k)] = ŵ_k^β/sqrt(β!) m_{|β|+order_shift}(b_k, |ŵ_k|)`` for every neuron."""
    m = get_activation(act).mean_numpy(mode.degree + order_shift)(b, np.linalg.norm(w_hat, axis=1))
    mono = np.prod([w_hat[:, i] ** n for i, n in mode.items], axis=0) if mode.items else np.ones(len(b))
    return mono / math.sqrt(mode.factorial) * m


def exact_network(net: MeanFieldBatch, run: int, g: np.ndarray, modes, act: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``f_β`` and eNTK ``λ_β`` of one run of ``net`` under ``x_i = sqrt(g_i) z_i``, ``z ~ N(0, I)``.

    ``f_β = (1/(γN)) Σ_k (a_k E[h_β σ(u_k)] − a⁰_k E[h_β σ(u⁰_k)])``;
    ``λ_β = (1/N) Σ_k (E[h_β σ_k]² + a_k² (Σ_i E[h_β σ'_k x_i]² + E[h_β σ'_k]²))`` with
    ``E[h_β σ' x_i] = sqrt(g_i)(sqrt(β_i+1) E[h_{β+e_i} σ'] + sqrt(β_i) E[h_{β−e_i} σ'])`` (``z h_n = sqrt(n+1)
    h_{n+1} + sqrt(n) h_{n-1}``).
    """
    p = {k: v[run].double().numpy() for k, v in net.params.items()}
    gamma, width = float(net.gamma[run]), net.width
    sg = np.sqrt(g)
    w_hat, w0_hat = p["w"] * sg, p["w0"] * sg
    f, lam = [], []
    for m in modes:
        f.append((p["a"] @ _neuron_projection(m, w_hat, p["b"], 0, act)
                  - p["a0"] @ _neuron_projection(m, w0_hat, p["b0"], 0, act)) / (gamma * width))
        amp = _neuron_projection(m, w_hat, p["b"], 0, act)
        slope = _neuron_projection(m, w_hat, p["b"], 1, act)
        grad_x = np.zeros_like(w_hat)
        for i in range(len(g)):
            up = _neuron_projection(m.shift(i, 1), w_hat, p["b"], 1, act) * math.sqrt(m.order(i) + 1)
            down = m.shift(i, -1)
            dn = _neuron_projection(down, w_hat, p["b"], 1, act) * math.sqrt(m.order(i)) if down else 0.0
            grad_x[:, i] = sg[i] * (up + dn)
        lam.append(np.mean(amp**2 + p["a"] ** 2 * ((grad_x**2).sum(1) + slope**2)))
    return np.array(f), np.array(lam)


# ----------------------------------------------------------------------------------------------------------------
# the SGD step and the NTK
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("batched", [False, True])
def test_sgd_step_is_sgd_with_rate_eta_gamma2_N(batched, activation):
    """The written-out, chunk-accumulated step equals autograd SGD on ½ mean (f − y)² with learning rate η γ² N, per
    run, both run by run and with all runs in batched matmuls (B = 600: chunks of 200), for a kinked and a smooth σ."""
    cfgs = [small_cfg(richness=0.3, dtype="float64", batch=600).replace(network={"activation": activation}),
            small_cfg(richness=0.05, seed=3, dtype="float64", batch=600).replace(network={"activation": activation})]
    sim = new_simulation(cfgs, batched=batched)
    net = sim.net
    assert net.chunk == 200 and net.batched == batched
    perturb(net, 0.1)
    x, y = sim._sample([0, 1])
    eta = torch.tensor([0.7, 0.2], dtype=torch.float64)
    before = {k: v.clone() for k, v in net.params.items()}
    losses = net.step(x, y, eta.tolist(), [0, 1])
    for r in range(2):
        theta = {k: before[k][r].clone().requires_grad_() for k in ("w", "b", "a")}
        u = x[r] @ theta["w"].T + theta["b"]
        u0 = x[r] @ before["w0"][r].T + before["b0"][r]
        gamma, width = float(net.gamma[r]), net.width
        f = (net.act(u) @ theta["a"] - net.act(u0) @ before["a0"][r]) / (gamma * width)
        loss = 0.5 * ((f - y[r]) ** 2).mean()
        assert losses[r] == pytest.approx(float(loss.detach()), rel=1e-12)
        grads = torch.autograd.grad(loss, list(theta.values()))
        for (k, p), gr in zip(theta.items(), grads):
            expect = p.detach() - float(eta[r]) * gamma**2 * width * gr
            torch.testing.assert_close(net.params[k][r], expect, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype, batch", [("float32", 600), ("float64", 600), ("float32", 301)])
def test_compiled_cpu_relu_step_is_the_compiled_kernel_and_sgd(dtype, batch):
    """The CPU ReLU step (one product for [w; w⁰] xᵀ, numba passes for outputs, residuals and masks, one product for
    all three gradients, chunks of ≤ 128) gives the compiled generic kernel's step up to the order of the float sums
    (each step from the same parameters; B = 600: chunks of 120 against 200; B = 301: 101, 101, 99 against 151,
    150; the losses to 1e-6 relative in float32 and 1e-13 in float64, each group's update to 1e-5 and 1e-12 of its
    largest element), and is autograd SGD with rate η γ² N (float64: to 1e-10)."""
    cfg = small_cfg(richness=0.3, dtype=dtype, batch=batch, compile=True)
    fast, generic = new_simulation([cfg]), new_simulation([cfg])
    assert fast.net._relu_step is not None and fast.net.chunk == {600: 200, 301: 151}[batch]
    generic.net._relu_step = None
    perturb(fast.net, 0.1)
    rtol, utol = (1e-6, 1e-5) if dtype == "float32" else (1e-13, 1e-12)
    for _ in range(3):
        for k, v in fast.net.params.items():
            generic.net.params[k].copy_(v)
        x, y = fast._sample([0])
        before = {k: v[0].clone() for k, v in fast.net.params.items()}
        losses = fast.net.step(x, y, [0.7], [0])
        assert generic.net.step(x, y, [0.7], [0]) == pytest.approx(losses, rel=rtol)
        for k in ("w", "b", "a"):
            step_fast, step_generic = fast.net.params[k][0] - before[k], generic.net.params[k][0] - before[k]
            assert float((step_fast - step_generic).abs().max()) <= utol * float(step_generic.abs().max())
    if dtype == "float64":
        theta = {k: before[k].clone().requires_grad_() for k in ("w", "b", "a")}
        width = fast.net.width
        f = (torch.relu(x[0] @ theta["w"].T + theta["b"]) @ theta["a"]
             - torch.relu(x[0] @ before["w0"].T + before["b0"]) @ before["a0"]) / (0.3 * width)
        loss = 0.5 * ((f - y[0]) ** 2).mean()
        assert losses[0] == pytest.approx(float(loss.detach()), rel=1e-12)
        for (k, th), gr in zip(theta.items(), torch.autograd.grad(loss, list(theta.values()))):
            torch.testing.assert_close(fast.net.params[k][0], th.detach() - 0.7 * 0.3**2 * width * gr, rtol=1e-10,
                                       atol=1e-12)


def test_cpu_relu_step_falls_back_to_the_generic_kernel_with_a_warning(monkeypatch):
    """If the numba pass of the CPU ReLU step cannot run, the step warns once and takes the generic compiled kernel:
    the same parameters as a simulation that never had the fast path."""
    import featureode.sim.batch as batch

    cfg = small_cfg(richness=0.3, batch=512, compile=True)
    broken, generic = new_simulation([cfg]), new_simulation([cfg])
    generic.net._relu_step = None

    def fail():
        raise ImportError("no numba here")

    monkeypatch.setattr(batch, "_relu_chunk_kernel", fail)
    with pytest.warns(UserWarning, match="CPU ReLU step failed"):
        broken.net.step(*broken._sample([0]), [0.5], [0])
    assert broken.net._relu_step is None
    generic.net.step(*generic._sample([0]), [0.5], [0])
    for k in ("w", "b", "a"):
        assert torch.equal(broken.net.params[k], generic.net.params[k])


def test_ntk_top_matches_closed_form_gram():
    """λ_top from torch.func per-sample gradients equals the top eigenvalue of the closed-form empirical NTK
    (1/N)[σσᵀ + (aσ')(aσ')ᵀ ⊙ (x·x' + 1)] / P."""
    sim = new_simulation([small_cfg(dtype="float64")])
    net, probe = sim.net, sim.probes[0]
    perturb(net, 0.2)
    p = {k: v[0] for k, v in net.params.items()}
    u = probe @ p["w"].T + p["b"]
    s, ds = torch.func.jvp(net.act, (u,), (torch.ones_like(u),))
    da = ds * p["a"]
    gram = (s @ s.T + (da @ da.T) * (probe @ probe.T + 1)) / net.width / probe.shape[0]
    assert net.ntk_top(0, probe) == pytest.approx(float(torch.linalg.eigvalsh(gram)[-1]), rel=1e-10)


# ----------------------------------------------------------------------------------------------------------------
# estimators
# ----------------------------------------------------------------------------------------------------------------
def test_lambda_estimator_is_the_u_statistic_of_per_sample_gradients():
    """The chunked λ_β equals Σ_{p≠q} g_p·g_q/(n(n−1)) with g_p = h_β(x_p) ∇_θ f(x_p) from torch.func (metric γ²N),
    and f_β, the loss and r_i equal their direct definitions."""
    cfg = small_cfg(expr="z0 + z1*z2", width=48, n_test=300, dtype="float64")
    sim = new_simulation([cfg], modes=["1", "h2(z0)"])
    net, test = sim.net, sim.tests[0]
    perturb(net, 0.3)
    meas = net.measure(0, test, sim.specs[0].support)
    p = {k: v[0] for k, v in net.params.items()}
    x, h, n = test.x[:test.n], test.h[:test.n], test.n
    gamma, width = float(net.gamma[0]), net.width

    def f_single(th, xs):
        return (th["a"] * net.act(th["w"] @ xs + th["b"])).sum() / (gamma * width)

    theta = {k: p[k] for k in ("a", "w", "b")}
    jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, x)
    j = torch.cat([jac[k].reshape(n, -1) for k in theta], 1) * math.sqrt(gamma**2 * width)
    for col in range(h.shape[1]):
        g = h[:, col, None] * j
        total = g.sum(0)
        u_stat = (total @ total - (g * g).sum()) / (n * (n - 1))
        assert meas.lam[col] == pytest.approx(float(u_stat), rel=1e-9, abs=1e-12)
    f = net.output(x[None])[0]
    assert meas.f == pytest.approx((h * f[:, None]).mean(0).numpy(), rel=1e-9, abs=1e-12)
    assert meas.loss == pytest.approx(float(0.5 * ((f - test.y[:n]) ** 2).mean()), rel=1e-9)
    assert meas.r == pytest.approx((p["w"] ** 2).mean(0).numpy(), rel=1e-12)


def _t_bar(n_repeats: int, n_modes: int, family_error: float = 0.01) -> float:
    """Multiple of the standard error of a mean of ``n_repeats`` independent repeats (sample sd, Student t with
    ``n_repeats − 1`` degrees of freedom) that all ``n_modes`` two-sided comparisons stay within with probability
    ≥ 1 − ``family_error`` (Bonferroni)."""
    return float(stats.t.ppf(1 - family_error / (2 * n_modes), n_repeats - 1))


def test_projections_and_lambdas_recover_the_exact_gaussian_integrals():
    """A planted network (init perturbed, so f ≠ 0 on every mode): the test-set projections f_β agree with the exact
    Gaussian integrals within 4 standard errors (n = 20 000, normal: each comparison fails with probability 6e-5),
    and λ_β averaged over 12 independent test sets agrees with its exact value within the Student-t bar of that mean
    (11 degrees of freedom, all modes together fail with probability ≤ 1%; Monte Carlo error only: the U-statistic
    is unbiased)."""
    cfg = small_cfg(expr="z0 + z0*z1", width=128, n_test=20000)
    modes = ["1", "z2", "h2(z0)", "z0*z1*z2"]
    spec = RunSpec.build(cfg, modes)
    sim = Simulation([spec], None, progress=False)
    perturb(sim.net, 0.25)
    f_exact, lam_exact = exact_network(sim.net, 0, spec.spectrum.g, spec.modes, "relu")
    lams = []
    n_sets = 12
    for seed in range(n_sets):
        test = make_test_set(spec.spectrum, spec.target, spec.modes, 20000, stream(100 + seed, "test"), "cpu",
                             torch.float32)
        m = sim.net.measure(0, test, spec.support)
        lams.append(m.lam)
        if seed == 0:
            assert np.all(np.abs(m.f - f_exact) < 4 * m.f_stderr + 1e-6), (m.f, f_exact, m.f_stderr)
    lams = np.array(lams)
    err = lams.std(0, ddof=1) / math.sqrt(n_sets)
    bar = _t_bar(n_sets, len(spec.modes))
    assert np.all(np.abs(lams.mean(0) - lam_exact) < bar * err), (lams.mean(0), lam_exact, err, bar)


def test_init_entk_rayleigh_quotients_match_exact_infinite_width():
    """Measured λ_β(0) of finite networks (N = 512), averaged over 12 seeds, agree with the kernel layer's exact
    infinite-width values within the Student-t bar of the mean (neuron and test-set sampling; 11 degrees of
    freedom, all modes together fail with probability ≤ 1%). Both estimators are unbiased: the eNTK is an average
    over neurons and the test-set estimate is a U-statistic."""
    modes = ["z0", "z1", "z0*z1", "h2(z0)"]
    vals = []
    n_seeds = 12
    for seed in range(n_seeds):
        spec = RunSpec.build(small_cfg(expr="z0 + z0*z1", width=512, seed=seed, n_test=12000), modes)
        sim = Simulation([spec], None, progress=False)
        vals.append(sim.net.measure(0, sim.tests[0], spec.support).lam)
    vals = np.array(vals)
    exact, exact_err = kernel.exact_eigenvalues(spec.modes, spec.spectrum, "relu", 0.5)
    assert np.all(exact_err == 0)  # deterministic quadrature: all the error is the network's
    err = np.sqrt(vals.var(0, ddof=1) / len(vals))
    bar = _t_bar(n_seeds, len(spec.modes))
    assert np.all(np.abs(vals.mean(0) - exact) < bar * err), (vals.mean(0), exact, err, bar)


# ----------------------------------------------------------------------------------------------------------------
# dynamics
# ----------------------------------------------------------------------------------------------------------------
def test_lazy_limit_follows_the_kernel_flow():
    """γ = 0.01: the in-support loss follows the kernel flow Σ v_β² e^{−2 λ_β t}/Σ v_β² with the exact init
    eigenvalues, |log ratio| ≤ 0.08 wherever the flow is above 0.05, and the test loss has t50 within 6%.

    (The test loss itself departs from the flow late, by about a third at L/L(0) ≈ 0.1 here: the kernel also feeds modes outside
    the target's support, which only the extended basis of theory §4 captures; finite width N = 1024 moves λ_β by a
    few per cent.)
    """
    cfg = small_cfg(expr="z0*z1", dim=6, width=1024, richness=0.01, batch=512, t_max=60.0, n_points=14,
                    t_min=1.0, n_test=8000)
    res = simulate_config(cfg, progress=False)
    spec = RunSpec.build(cfg)
    lam, _ = kernel.exact_eigenvalues(spec.modes, spec.spectrum, "relu", 0.5)
    t = res.t
    v2 = spec.v**2
    flow = (v2 * np.exp(-2 * np.outer(t, lam))).sum(1) / v2.sum()
    in_support = res.in_support_loss
    mask = flow > 0.05
    assert np.max(np.abs(np.log(in_support[mask] / flow[mask]))) < 0.08, np.c_[t, in_support, flow]
    assert res.t50 == pytest.approx(crossing_time(t, flow, 0.5), rel=0.06)


def _strip(res) -> dict:
    return {k: v for k, v in res.to_json().items() if k not in ("wall_s", "provenance")}   # record keeping


def test_resume_after_interrupt_and_crash_is_bit_identical(tmp_path, monkeypatch):
    """A batch of two runs interrupted by Ctrl-C (checkpoint on interrupt), and one crashed after a periodic
    checkpoint, both resume to exactly the uninterrupted results and parameters."""
    cfgs = [small_cfg(t_max=8.0, checkpoint_every=5), small_cfg(expr="z0", richness=0.2, seed=4, t_max=8.0,
                                                                checkpoint_every=5)]
    reference = simulate_batch(cfgs, tmp_path / "ref", progress=False)
    original = Simulation._advance

    def interrupt_at(step, action):
        def advance(self):
            original(self)
            if self.step_count == step:
                action()
        return advance

    monkeypatch.setattr(Simulation, "_advance", interrupt_at(12, lambda: signal.raise_signal(signal.SIGINT)))
    with pytest.raises(KeyboardInterrupt):
        simulate_batch(cfgs, tmp_path / "int", progress=False)
    assert torch.load(tmp_path / "int" / "checkpoint.pt", weights_only=True)["step"] == 12

    def crash():
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(Simulation, "_advance", interrupt_at(13, crash))
    with pytest.raises(RuntimeError, match="simulated crash"):
        simulate_batch(cfgs, tmp_path / "crash", progress=False)
    assert torch.load(tmp_path / "crash" / "checkpoint.pt", weights_only=True)["step"] == 10
    monkeypatch.setattr(Simulation, "_advance", original)

    for folder in ("int", "crash"):
        resumed = simulate_batch(cfgs, tmp_path / folder, resume=True, progress=False)
        assert [_strip(r) for r in resumed] == [_strip(r) for r in reference]
        for i in range(2):
            a = np.load(tmp_path / "ref" / f"run_{i}" / "mlp.npz")
            b = np.load(tmp_path / folder / f"run_{i}" / "mlp.npz")
            for k in ("w", "b", "a", "loss", "f", "lambda"):
                assert np.array_equal(a[k], b[k])
    with pytest.raises(MLPError, match="different configuration"):
        simulate_batch([cfgs[1], cfgs[0]], tmp_path / "int", resume=True, progress=False)


def test_outputs_and_contract_keys(tmp_path):
    """mlp.json has the theory §6 keys with [time][mode] / [time][dimension] arrays, plus mlp.npz and the checkpoint;
    f = 0 at t = 0, so the loss starts at L(0) = ½ mean_p f*(x_p)² over the seeded test set (recomputed here with
    staircase(2) = (z0 + z0 z1)/sqrt2 written by hand), which estimates ½ E[f*²] = ½."""
    cfg = small_cfg(expr="staircase(2)", t_max=4.0, n_points=5, t_min=0.5)
    res = simulate_config(cfg, tmp_path, progress=False, modes=["1", "h2(z0)"])
    on_disk = json.loads((tmp_path / "mlp.json").read_text())
    for key in ("modes", "t", "loss", "in_support_loss", "t50", "t10", "f", "f_stderr", "lambda", "r"):
        assert key in on_disk
    assert on_disk["modes"] == ["z0", "z0*z1", "1", "h2(z0)"]
    n_t = len(on_disk["t"])
    assert on_disk["t"] == pytest.approx([0, 0.5, 0.5 * 8**0.25, 0.5 * 8**0.5, 0.5 * 8**0.75, 4.0])
    assert np.shape(on_disk["f"]) == np.shape(on_disk["lambda"]) == (n_t, 4)
    assert np.shape(on_disk["r"]) == (n_t, 6)
    # the test set: n_test draws of z ~ N(0, I_d) in float64 from the run's "test" stream, targets cast to float32
    z = torch.randn(cfg.training.n_test, 6, generator=stream(cfg.training.seed, "test"), dtype=torch.float64)
    y = ((z[:, 0] + z[:, 0] * z[:, 1]) / math.sqrt(2)).float().double()
    assert on_disk["loss"][0] == pytest.approx(float(0.5 * (y**2).mean()), rel=1e-5)
    # Monte Carlo: Var(f*²) = E[z0⁴] E[(1 + z1)⁴]/4 − 1 = 3·10/4 − 1 = 6.5, so ½ mean y² has sd ½ sqrt(6.5/n)
    assert abs(on_disk["loss"][0] - 0.5) < 4 * 0.5 * math.sqrt(6.5 / cfg.training.n_test)
    assert on_disk["f"][0] == [0.0] * 4 and on_disk["in_support_loss"][0] == 1.0
    assert on_disk["complete"] and on_disk["reached_t"] == 4.0
    # theory §3: η = min(eta_max, eta_safety/λ_top) with the default eta_safety = 0.5, i.e. η ≤ 0.5/λ_top
    top, eta = res.arrays["lambda_top"], res.arrays["eta"]
    assert cfg.training.eta_safety == 0.5 and np.all(top > 0)
    np.testing.assert_allclose(eta, np.minimum(cfg.training.eta_max, 0.5 / top), rtol=1e-12)
    assert (tmp_path / "mlp.npz").exists() and (tmp_path / "checkpoint.pt").exists()
    assert res.meta["digest"] == cfg.digest(("data", "target", "network", "training"))


def test_divergence_is_caught():
    """η λ_top = 50 ≫ 2: the loss explodes and the error names step, t and a smaller eta_safety."""
    cfg = small_cfg(eta_max=1e3, eta_safety=50.0, t_max=1e4, n_points=1)
    with pytest.raises(DivergenceError, match=r"step \d+, t = .*eta_safety"):
        simulate_config(cfg, progress=False)


def test_unreachable_t_max_stops_and_says_so():
    cfg = small_cfg(t_max=1000.0, max_steps=15)
    with pytest.warns(UserWarning, match="not reached within max_steps = 15"):
        res = simulate_config(cfg, progress=False)
    assert not res.status.complete and res.status.reached_t < 1000.0
    assert res.t[-1] == res.status.reached_t and res.arrays["steps"][-1] == 15


def test_stop_loss_ends_the_run_at_the_first_measurement_below_the_floor():
    full = simulate_config(small_cfg(expr="z0", t_max=40.0, n_points=20), progress=False)
    stopped = simulate_config(small_cfg(expr="z0", t_max=40.0, n_points=20, stop_loss=0.3), progress=False)
    ratio = full.arrays["loss_ratio"]
    k = int(np.argmax(ratio <= 0.3))
    assert 0 < k < len(ratio) - 1, "the floor must be crossed strictly inside the full run"
    assert stopped.status.complete and np.array_equal(stopped.t, full.t[:k + 1])
    assert np.array_equal(stopped.loss, full.loss[:k + 1])  # same seed: the same trajectory, cut after the crossing


def test_batched_runs_equal_single_runs():
    """A run's trajectory does not depend on the batch it trains in (own clock, step size and samples)."""
    cfgs = [small_cfg(t_max=6.0), small_cfg(expr="z0*z1", richness=0.1, seed=2, t_max=6.0, eta_safety=0.3)]
    batched = simulate_batch(cfgs, progress=False)
    for cfg, b in zip(cfgs, batched):
        single = simulate_config(cfg, progress=False)
        assert np.array_equal(single.t, b.t) and np.array_equal(single.arrays["steps"], b.arrays["steps"])
        np.testing.assert_allclose(single.loss, b.loss, rtol=1e-5)
        np.testing.assert_allclose(single.f, b.f, rtol=1e-4, atol=1e-6)


def test_batched_matmul_layout_equals_run_by_run():
    """The GPU layout (all runs in one bmm, finished runs frozen with η = 0) gives the run-by-run trajectories."""
    cfgs = [small_cfg(t_max=5.0), small_cfg(expr="z0", richness=0.1, seed=2, t_max=5.0, eta_safety=0.3)]
    out = []
    for batched in (False, True):
        sim = new_simulation(cfgs, batched=batched)
        sim.run()
        out.append([sim.trajectory(i) for i in range(2)])
    for a, b in zip(*out):
        assert np.array_equal(a.t, b.t) and np.array_equal(a.arrays["steps"], b.arrays["steps"])
        np.testing.assert_allclose(a.loss, b.loss, rtol=1e-5)
        np.testing.assert_allclose(a.f, b.f, rtol=1e-4, atol=1e-6)


def test_batch_rejects_incompatible_configs():
    with pytest.raises(MLPError, match=r"\[network\] width"):
        simulate_batch([small_cfg(), small_cfg(width=128)], progress=False)


def test_compiled_step_matches_eager():
    """torch.compile path (the default) gives the same trajectory as eager execution up to float32 round-off."""
    eager = simulate_config(small_cfg(t_max=3.0, n_points=4), progress=False)
    compiled = simulate_config(small_cfg(t_max=3.0, n_points=4, compile=True), progress=False)
    assert np.array_equal(compiled.t, eager.t)
    np.testing.assert_allclose(compiled.loss, eager.loss, rtol=1e-4)
    np.testing.assert_allclose(compiled.lam, eager.lam, rtol=1e-3, atol=1e-6)
    for part in ("readout", "weights", "bias"):
        np.testing.assert_allclose(compiled.arrays[f"lambda_parts/{part}"], eager.arrays[f"lambda_parts/{part}"],
                                   rtol=1e-3, atol=1e-6)


@pytest.mark.slow
def test_halving_eta_safety_changes_t50_by_less_than_2_percent():
    """The adaptive step approximates gradient flow: on the default rich run (staircase(2), d = 16, γ = 0.5,
    N = 1024, B = 2048) t50 and t10 move by < 2% when eta_safety is halved (0.5 → 0.25)."""
    base = small_cfg(expr="staircase(2)", dim=16, width=1024, richness=0.5, batch=2048, t_max=60.0, n_points=40,
                     t_min=0.1, n_test=20000, compile=True)
    runs = simulate_batch([base, base.replace(training={"eta_safety": 0.25})], progress=False)
    assert runs[0].t50 == pytest.approx(runs[1].t50, rel=0.02)
    assert runs[0].t10 == pytest.approx(runs[1].t10, rel=0.02)


# ----------------------------------------------------------------------------------------------------------------
# diagnostics (issue 14): λ split by parameter group, Gram, jackknife errors, ⟨a²⟩ and joint moments
# ----------------------------------------------------------------------------------------------------------------
def _autograd_groups(net, x, gamma, width):
    """Per-sample gradients of f by torch.autograd (torch.func) for each parameter group, times sqrt(q) = sqrt(γ²N)."""
    p = {k: v[0] for k, v in net.params.items()}

    def f_single(th, xs):
        return (th["a"] * net.act(th["w"] @ xs + th["b"])).sum() / (gamma * width)

    theta = {k: p[k] for k in ("a", "w", "b")}
    jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, x)
    return {k: jac[k].reshape(x.shape[0], -1) * math.sqrt(gamma**2 * width) for k in theta}


def test_lambda_parts_and_gram_match_autograd_per_parameter_group():
    """Each part of λ_β (readout ∂/∂a, weights ∂/∂w, bias ∂/∂b) equals the U-statistic Σ_{p≠q} g_p·g_q/(n(n−1)) of
    that group's autograd gradients g_p = h_β(x_p) ∇f(x_p), and the Gram K_{αβ} the U-statistic of g^α_p·g^β_q over
    all groups; a2 and the joint moments equal their definitions on the parameters."""
    cfg = small_cfg(expr="z0 + z1*z2", width=48, n_test=300, dtype="float64", richness=0.3)
    sim = new_simulation([cfg], modes=["1", "h2(z0)"])
    net, test, spec = sim.net, sim.tests[0], sim.specs[0]
    perturb(net, 0.3)
    meas = net.measure(0, test, spec.support)
    x, h, n = test.x[:test.n], test.h[:test.n], test.n
    jac = _autograd_groups(net, x, float(net.gamma[0]), net.width)
    names = {"a": 0, "w": 1, "b": 2}  # readout, weights, bias
    full = torch.cat(list(jac.values()), 1)

    def u_stat(ga, gb):
        return float((ga.sum(0) @ gb.sum(0) - (ga * gb).sum()) / (n * (n - 1)))

    for col in range(h.shape[1]):
        for k, row in names.items():
            g = h[:, col, None] * jac[k]
            assert meas.parts[row, col] == pytest.approx(u_stat(g, g), rel=1e-9, abs=1e-13), (k, col)
        for col2 in range(h.shape[1]):
            ga, gb = h[:, col, None] * full, h[:, col2, None] * full
            assert meas.gram[col, col2] == pytest.approx(u_stat(ga, gb), rel=1e-9, abs=1e-13), (col, col2)
    p = {k: v[0].double() for k, v in net.params.items()}
    assert spec.support == (0, 1, 2)
    assert meas.a2 == pytest.approx(float((p["a"] ** 2).mean() / (p["a0"] ** 2).mean()), rel=1e-12)
    joint = ((p["a"] ** 2)[:, None] * p["w"][:, :3] ** 2).mean(0) / (p["a0"] ** 2).mean()
    np.testing.assert_allclose(meas.joint, joint.numpy(), rtol=1e-12)


def test_jackknife_errors_match_the_spread_over_independent_test_sets():
    """The jackknife standard errors of λ and its parts (16 groups), averaged over 24 independent test sets, agree with
    the standard deviation of the estimates across those sets within [0.6, 1.6] (the sd of 24 values is known to
    ±15%, so a wrong estimator, e.g. without the group structure or off by sqrt(G), fails)."""
    cfg = small_cfg(expr="z0 + z0*z1", width=64, n_test=4096)
    spec = RunSpec.build(cfg, ["h2(z0)"])
    sim = Simulation([spec], None, progress=False)
    perturb(sim.net, 0.25)
    est, se = [], []
    for seed in range(24):
        test = make_test_set(spec.spectrum, spec.target, spec.modes, 4096, stream(200 + seed, "test"), "cpu",
                             torch.float32, chunk=CPU_CHUNK)
        m = sim.net.measure(0, test, spec.support)
        est.append(np.vstack([m.parts, m.lam]))
        se.append(np.vstack([m.parts_stderr, m.lam_stderr]))
    ratio = np.std(est, axis=0, ddof=1) / np.mean(se, axis=0)
    assert np.all((0.6 < ratio) & (ratio < 1.6)), ratio


def test_simulation_records_diagnostics_in_mlp_json(tmp_path):
    """mlp.json keeps every earlier key and adds a2 (1 at t = 0), joint (support directions), lambda_parts and their
    errors, and the Gram (n_t × M × M, diagonal = λ up to round-off); the file loads back as the same Trajectory."""
    from featureode.results.trajectory import Trajectory

    cfg = small_cfg(expr="staircase(2)", t_max=4.0, n_points=5, t_min=0.5)
    res = simulate_config(cfg, tmp_path, progress=False, modes=["h2(z0)"])
    on_disk = json.loads((tmp_path / "mlp.json").read_text())
    for key in ("modes", "target", "t", "loss", "loss_ratio", "in_support_loss", "t50", "t10", "f", "f_stderr",
                "lambda", "r", "eta", "lambda_top", "steps", "reached_t", "complete", "t_max", "device", "dtype",
                "compiled", "wall_s", "batch_runs", "n_test", "digest", "a2", "joint", "lambda_parts",
                "lambda_parts_stderr", "lambda_stderr", "gram", "joint_directions"):
        assert key in on_disk, key
    n_t = len(on_disk["t"])
    assert on_disk["joint_directions"] == ["z0", "z1"] and np.shape(on_disk["joint"]) == (n_t, 2)
    assert on_disk["a2"][0] == 1.0 and set(on_disk["lambda_parts"]) == {"readout", "weights", "bias"}
    gram = np.asarray(on_disk["gram"])
    assert gram.shape == (n_t, 3, 3)
    np.testing.assert_allclose(np.diagonal(gram, axis1=1, axis2=2), on_disk["lambda"], rtol=1e-5)
    back = Trajectory.load(tmp_path, "mlp")
    assert np.array_equal(back.lam, res.lam) and np.array_equal(back.arrays["gram"], res.arrays["gram"])
    npz = np.load(tmp_path / "mlp.npz")
    assert {"a", "w", "b", "lambda_parts/readout", "gram", "steps"} <= set(npz.files)


# ----------------------------------------------------------------------------------------------------------------
# faults (issue 11)
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [("width", 10**9), ("batch", 10**11)])
def test_memory_is_estimated_and_refused_before_allocating(key, value):
    cfg = small_cfg(t_max=1.0)
    cfg = cfg.replace(network={key: value}) if key == "width" else cfg.replace(training={key: value})
    with pytest.raises(MLPError, match=rf"{key} = {value}.*needs about [\d.e+]+ GiB.*reduce width or batch"):
        simulate_config(cfg, progress=False)


def test_batch_of_one_is_not_reported_as_divergence(monkeypatch):
    """B = 1 on a heavy-tailed target (y = z0 z1 z2) at a step size that is stable for it: single-sample losses exceed
    10 L(0) (the old per-step rule's trigger) many times, yet the run completes; a real divergence at B = 1 is still
    caught and the advice mentions the batch. (At the default eta_max = 1 this run does diverge: its test loss grows
    to 450 L(0), from SGD noise at B = 1, which the message then says.)"""
    cfg = small_cfg(expr="z0*z1*z2", width=64, batch=1, t_max=60.0, n_points=4, t_min=10.0, n_test=2000,
                    ntk_probe=32, ntk_every=50, eta_max=0.1)
    seen = []
    step = MeanFieldBatch.step

    def spy(self, *args):
        losses = step(self, *args)
        seen.extend(losses)
        return losses

    monkeypatch.setattr(MeanFieldBatch, "step", spy)
    res = simulate_config(cfg, progress=False)
    assert res.status.complete and len(seen) > 500
    assert max(seen) > 10 * res.loss[0]
    monkeypatch.setattr(MeanFieldBatch, "step", step)
    with pytest.raises(DivergenceError, match=r"diverged at step \d+.*eta_safety.*larger \[training\] batch"):
        simulate_config(cfg.replace(training={"eta_max": 1e3, "eta_safety": 50.0, "t_max": 1e4}), progress=False)


def test_damaged_checkpoint_is_one_clear_error(tmp_path, capsys):
    """A truncated checkpoint.pt: simulate --resume says the file is damaged and what to do, in one line."""
    from featureode.cli import main

    cfg = small_cfg(t_max=2.0, n_points=3, checkpoint_every=2)
    simulate_config(cfg, tmp_path, progress=False)
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(MLPError, match=r"checkpoint.pt is damaged .*delete it, or rerun without --resume"):
        simulate_config(cfg, tmp_path, resume=True, progress=False)
    toml = tmp_path / "c.toml"
    toml.write_text('[data]\ndim = 6\n[target]\nexpr = "staircase(2)"\n[network]\nwidth = 256\n'
                    '[training]\nt_max = 2.0\ncompile = false\nthreads = 1\n')
    out = tmp_path / "cli"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"PK\x03\x04 not a checkpoint")
    assert main(["simulate", str(toml), "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("featureode: error: ") and "is damaged" in err[0]


def test_jackknife_groups_respect_chunks_and_memory():
    from featureode.sim.measure import JACKKNIFE_GROUPS, JACKKNIFE_MEMORY, jackknife_groups

    assert jackknife_groups(79, 2, 1024, 16) == JACKKNIFE_GROUPS
    assert jackknife_groups(3, 2, 1024, 16) == 3 and jackknife_groups(1, 2, 1024, 16) == 1
    g = jackknife_groups(79, 40, 4096, 64)  # extended basis at N = 4096, d = 64: 85 MB per group
    assert 2 <= g < JACKKNIFE_GROUPS and g * 8 * 40 * 4096 * 66 <= max(JACKKNIFE_MEMORY, 2 * 8 * 40 * 4096 * 66)


def test_the_test_set_size_does_not_change_the_trained_network(tmp_path):
    """The premise of ``docs/validation/test_set_size.py``: the test points come from their own stream, so a run
    with a larger ``n_test`` trains the very same network (bitwise equal parameters at the end) and only measures it
    on more points."""
    nets = []
    for n_test in (2000, 6000):
        out = tmp_path / str(n_test)
        simulate_config(small_cfg(t_max=4.0, n_test=n_test, checkpoint_every=10**6), out_dir=out, progress=False)
        nets.append(torch.load(out / "checkpoint.pt", weights_only=False)["params"])
    assert set(nets[0]) >= {"w", "b", "a"}
    for key in nets[0]:
        assert torch.equal(nets[0][key], nets[1][key]), key
