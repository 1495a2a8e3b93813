"""The ``meanfield`` variant (:mod:`featureode.ode.meanfield`): the reduced per-neuron flow against independent
computations — its kernel at t = 0 against the exact quadrature of ``kernel_theory``, and its curve against the
full-coordinate flow of sampled neurons with projections by a Gauss–Hermite rule in z and gradients by autograd
(``_per_neuron.PerNeuron``), in d = 3 where the one coordinate outside the target's directions makes the reduction
exact in law. Plus the variant's seams: its place in ``solve_config``, the saved result and its one-line errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from featureode.calculus.hermite import Mode
from featureode.config import load_config
from featureode.kernel.theory import kernel_theory
from featureode.kernel.population import PopulationError
from featureode.ode.meanfield import MeanFieldError, MeanTable, ReducedFlow, meanfield_trajectory
from featureode.ode.solve import solve_config
from featureode.results.trajectory import ODEResult

from _per_neuron import PerNeuron, init_neurons


class _Broken(Exception):
    """Raised by :func:`_break_after`'s progress: a run stopped from outside, as a killed process is."""


def _break_after(at: float):
    """A ``progress`` for :meth:`ReducedFlow.run` that breaks the run at its first step past ``t = at``."""
    def fail(t: float) -> None:
        if t > at:
            raise _Broken
    return fail


def _small(**changes):
    base = {"target": {"expr": "z0*z1"}, "data": {"dim": 6, "exponent": 1.0},
            "network": {"activation": "erf", "richness": 0.5, "bias_std": 0.5}, "training": {"t_max": 60.0},
            "ode": {"basis": "extended", "variants": ["meanfield", "rational"]}}
    for key, val in changes.items():
        base[key] = {**base.get(key, {}), **val}
    return load_config().replace(**base)


@pytest.mark.parametrize("activation", ["relu", "erf", "tanh"])
def test_kernel_at_init_is_the_exact_gram(activation, monkeypatch):
    """K(0) of the 2^12-point rule on the modes S equals kernel_theory's exact quadrature to the rule's error (a
    wrong factor in any of the four parts — readout, ŵ_T, bias, the ξ part of the other coordinates — is ≥ 10%).
    tanh (no closed-form mean) goes through MeanTable, here on a coarser grid than the package's (61 × 50 points,
    |b| ≤ 8: the same code, a tenth of the 40 s its full tables take on an empty cache)."""
    if activation == "tanh":
        monkeypatch.setattr(MeanTable, "B", 3.0 * np.sinh(np.linspace(-math.asinh(8 / 3), math.asinh(8 / 3), 61)))
        monkeypatch.setattr(MeanTable, "S", np.geomspace(0.02, 30.0, 50))
        monkeypatch.setattr(MeanTable, "_splines", {})
    cfg = _small(network={"activation": activation}, data={"dim": 8})
    theory = kernel_theory(cfg, with_gram=True)
    flow = ReducedFlow(np.asarray(theory.g), list(theory.modes), np.asarray(theory.target), 0.5, 0.5, activation)
    exact = np.asarray(theory.gram)[np.ix_(flow.keep, flow.keep)]
    assert len(flow.keep) >= 2, "the extended basis of z0*z1 has companions in the target's directions"
    assert np.max(np.abs(flow.gram(flow.state0) - exact)) <= 0.02 * np.max(np.abs(exact))


def _full_flow(g, modes, v, gamma, bias_std, n, t_end, steps, seed, theta=None, nodes=12):
    """The multi-driver flow of every coordinate of n sampled neurons (erf, d = 3), f(t_end) on ``modes``."""
    pn = PerNeuron(g, "erf", n_nodes=nodes)
    theta = init_neurons(n, g, bias_std, seed) if theta is None else theta
    P = torch.tensor(np.asarray(g, float))
    phi0 = torch.stack([(theta[0] * pn.A(m, theta[1], theta[2])).mean() for m in modes])
    vt = torch.tensor(v)

    def f_of(th):
        return (torch.stack([(th[0] * pn.A(m, th[1], th[2])).mean() for m in modes]) - phi0) / gamma

    def vel(th):
        a, W, b = (x.detach().requires_grad_(True) for x in th)
        R = (vt - f_of((a, W, b))).detach()
        phi = sum(R[k] * (a * pn.A(m, W, b)) for k, m in enumerate(modes))
        da, dW, db = torch.autograd.grad(phi.sum(), (a, W, b))
        return gamma * da, gamma * dW * P, gamma * db

    h = t_end / steps
    for _ in range(steps):
        k1 = vel(theta)
        k2 = vel(tuple(x + h / 2 * k for x, k in zip(theta, k1)))
        k3 = vel(tuple(x + h / 2 * k for x, k in zip(theta, k2)))
        k4 = vel(tuple(x + h * k for x, k in zip(theta, k3)))
        theta = tuple(x + h / 6 * (p + 2 * q + 2 * r + s) for x, p, q, r, s in zip(theta, k1, k2, k3, k4))
    return f_of(theta).detach().numpy()


@pytest.mark.slow
def test_reduced_flow_is_the_full_coordinate_flow():
    """d = 3, modes z0 and z0*z1 both in the target (two drivers, T = {0, 1}): the reduced flow (a, ŵ_T, b, C) with
    ξ ~ Gamma(1/2) — exactly the law of ŵ_2(0)²/g_2 — against every coordinate of 3 × 4000 sampled neurons moved by
    autograd with projections by a 12³-point Gauss–Hermite rule (8³ points are 0.3% off on f_z0). f(t) at a time
    where the loss has about halved agrees to 4 s.e. of the seed-to-seed spread measured here plus 0.3% of v for the
    two rules. Dropping the coordinate outside T from |ŵ| (ξ = 0) misses f_z0*z1 by 0.018, four times its tolerance."""
    g = [0.5, 0.3, 0.2]
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    gamma, sb, t_end = 1.0, 0.5, 6.0
    flow = ReducedFlow(np.array(g), modes, v, gamma, sb, "erf", m=13)
    ts, fs, err = flow.run(t_end, t_min=0.05, h_max=0.25)
    assert err is None
    reduced = fs[-1]
    full = np.array([_full_flow(g, modes, v, gamma, sb, 4000, t_end, 24, seed) for seed in (1, 2, 3)])
    se = full.std(0, ddof=1) / math.sqrt(full.shape[0]) + 1e-4
    loss = float(((v - full.mean(0)) ** 2).sum() / (v**2).sum())
    assert 0.2 < loss < 0.8, f"the comparison time should sit mid-curve, loss there {loss:.3f}"
    assert np.all(np.abs(reduced - full.mean(0)) <= 4 * se + 0.003 * np.abs(v)), (reduced, full.mean(0), se)


def test_given_neurons_follow_the_full_coordinate_flow_exactly():
    """The reduction is exact for given neurons: 120 neurons, every coordinate moved by autograd (d = 3, erf,
    projections by a 24³-point rule), against the same neurons as (a, ŵ_T, b, C) with their own coordinate outside
    T, both RK4 with h = 0.25 to t = 6: f agrees to 2e-5 (measured 5e-6; the reference's rule moves f by 3e-4
    from 12³ to 24³ points and by 5e-5 from 16³ to 24³)."""
    g = [0.5, 0.3, 0.2]
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    theta = init_neurons(120, g, 0.5, 7)
    full = _full_flow(g, modes, v, 1.0, 0.5, 120, 6.0, 24, 7, theta=theta, nodes=24)
    flow = ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "erf", init=tuple(x.numpy() for x in theta))
    ts, fs, err = flow.run(6.0, t_min=0.25, h_max=0.25)
    assert err is None and len(ts) == 25
    assert float(((v - fs[-1]) ** 2).sum() / (v**2).sum()) < 0.8          # the neurons have moved
    np.testing.assert_allclose(fs[-1], full, atol=2e-5)
    with pytest.raises(MeanFieldError, match="init must be"):
        ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "erf", init=(np.zeros(3), np.zeros((3, 2)), np.zeros(3)))


def test_init_draw_is_the_simulators():
    """``init_draw`` is what the simulator starts from (its batch's parameters at t = 0)."""
    import torch

    from featureode.sim.batch import MeanFieldBatch, init_draw
    from featureode.sim.spec import RunSpec

    cfg = _small(network={"width": 64}, training={"seed": 3})
    batch = MeanFieldBatch.initialize([RunSpec.build(cfg)], torch.device("cpu"), torch.float64, False, False, 256)
    a, w, b = init_draw(3, 64, 6, 1.0, 0.5)
    for name, x in (("a", a), ("w", w), ("b", b)):
        assert torch.equal(batch.params[name][0], x)


def test_solve_config_places_meanfield_and_saves_it(tmp_path):
    cfg = _small()
    result = solve_config(cfg, tmp_path)
    assert list(result.variants) == ["meanfield", "rational"]
    mf = result.variants["meanfield"]
    assert mf.status.ok and mf.meta["parameter_free"] and not mf.meta["uses_measurements"]
    assert np.all(np.isfinite(mf.loss)) and mf.loss[0] == pytest.approx(1.0) and mf.loss[-1] < 0.5
    assert mf.t50 is not None and mf.t50 > 0
    info = mf.meta["info"]
    assert info["modes_kept"] + len(info["modes_projected"]) + len(info["modes_zero_by_symmetry"]) == len(result.modes)
    assert "z0*z1*h2(z2)" in info["modes_projected"]
    k = result.modes.index("z0*z1*h2(z2)")       # projected, not driven: small, positive growth from 0
    assert mf.f[0, k] == 0.0 and 0 < np.max(np.abs(mf.f[:, k])) < 0.1
    back = ODEResult.load(tmp_path)
    np.testing.assert_allclose(back.variants["meanfield"].loss, mf.loss)


def test_meanfield_errors_are_one_line():
    theory = kernel_theory(_small(), with_gram=True)
    with pytest.raises(MeanFieldError, match="m = 3 is not an integer in 4..20"):
        meanfield_trajectory(theory, 10.0, m=3)
    with pytest.raises(MeanFieldError, match="t_max"):
        meanfield_trajectory(theory, float("inf"))
    stopped = meanfield_trajectory(theory, 60.0, max_steps=5)
    assert not stopped.status.complete and "max_steps = 5" in stopped.status.error
    assert stopped.status.reached_t < 60.0


def test_tail_loss_is_the_networks_loss_on_the_modes_in_T():
    """The loss outside the basis on T (``tail=True``) against the network itself: 120 given neurons, erf, d = 3,
    followed to t = 6; the reference averages the neurons' output ``Σ a erf(ŵ·z + b)`` (each ``ŵ_⊥(t) =
    ŵ_⊥(0) e^{η_w g C}``) over ``z_2`` and integrates ``(P_T f − y)²`` over ``(z0, z1)``, by a 40³-point
    Gauss–Hermite rule on the network's own function (no table of means, no Stein formula). Its tail is the
    T-loss minus the basis' loss, which the exact test above checks. Agreement within 1e-5 of L(0), with a tail of
    0.013 (measured: 3e-7)."""
    from numpy.polynomial.hermite_e import hermegauss
    from scipy.special import erf

    g = np.array([0.5, 0.3, 0.2])
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    theta = init_neurons(120, list(g), 0.5, 7)
    a0, W0, b0 = (x.numpy().astype(float) for x in theta)
    flow = ReducedFlow(g, modes, v, 1.0, 0.5, "erf", init=(a0, W0, b0), tail=True)
    ts, fs, err = flow.run(6.0, t_min=0.25, h_max=0.25)
    assert err is None and flow.tail_path[0][-1] == ts[-1]
    # the final state, by the same steps (run() keeps only f)
    state = flow.state0
    for _ in range(len(ts) - 1):
        state = flow.step(state, 0.25)
    a, WT, b, C = state
    x, w = hermegauss(40)
    w = w / w.sum()

    def output(a, WT, b, C):
        wperp = W0[:, 2] * np.exp(g[2] * C)
        u = (WT[:, 0, None, None, None] * x[None, :, None, None] + WT[:, 1, None, None, None] * x[None, None, :, None]
             + wperp[:, None, None, None] * x[None, None, None, :] + b[:, None, None, None])
        return np.tensordot(a, erf(u), axes=1) / a.size @ w     # P_T f on the (z0, z1) grid

    fT = output(a, WT, b, C) - output(a0, W0[:, :2], b0, np.zeros_like(C))
    y = 0.6 * x[:, None] + 0.8 * x[:, None] * x[None, :]
    t_loss = float(np.einsum("i,j,ij->", w, w, (fT - y) ** 2))
    basis = float(((v - fs[-1]) ** 2).sum())
    ref = (t_loss - basis) / float((v**2).sum())
    assert ref > 1e-3, "the case should have a visible tail"
    assert flow.tail_path[1][-1] == pytest.approx(ref, abs=1e-5)
    loss = flow.loss(ts, fs)
    assert loss[-1] == pytest.approx(basis / float((v**2).sum()) + ref, abs=1e-5)


def test_tail_that_is_not_resolved_stops_the_run(monkeypatch):
    """``tail=True`` adds a loss that is never negative and is recorded in ``meta.info``; a tail that no pair of
    rules certifies stops the run with its curve and a one-line reason that names the way out (``tail=False``)."""
    import featureode.ode.meanfield as mf

    theory = kernel_theory(_small(), with_gram=True)
    plain = meanfield_trajectory(theory, 60.0)
    with_tail = meanfield_trajectory(theory, 60.0, tail=True)
    assert plain.meta["info"]["tail"] is None and with_tail.meta["info"]["tail"]["evaluations"] > 5
    assert with_tail.status.complete and np.all(with_tail.loss >= plain.loss - 1e-12)
    assert with_tail.loss[-1] > plain.loss[-1]
    monkeypatch.setattr(mf, "TAIL_TOL", -1.0)        # no two rules can agree: the tail is never certified
    stopped = meanfield_trajectory(theory, 60.0, tail=True, exact_tail=False)
    assert not stopped.status.complete and "loss outside the basis is not resolved" in stopped.status.error
    assert "tail=False" in stopped.status.error
    # by default (erf has closed-form pair moments) the tail becomes exact where the rules fail (here at the first
    # evaluation): the curve of the rules that certify it at the package's tolerance (2^8 neurons: the exact
    # tail's pairs grow as their square)
    exact = meanfield_trajectory(theory, 60.0, tail=True, m=8)
    assert exact.status.complete and exact.meta["info"]["tail"]["exact"]
    monkeypatch.undo()
    rules = meanfield_trajectory(theory, 60.0, tail=True, m=8)
    assert not rules.meta["info"]["tail"]["exact"]
    np.testing.assert_allclose(exact.loss, rules.loss, atol=1e-4)


def test_sobol_rungs_take_the_targets_part_exactly():
    """For |T| ≥ 3 the tail's ladder goes on after the product rules with scrambled Sobol' rules, whose integrals
    take the target's part exactly (``‖P_T f‖² − Σ_S f²``; the drive ``v``'s Stein form minus the rule's pull of
    ``P_T f``). 120 given neurons, erf, d = 4, ``z0*z1*z2`` + ``z0``, at a moved state: against a 40³-point
    Gauss–Hermite rule of the full form, the tail by 2^14 and 2^15 Sobol' points within 1e-5 of L(0) (measured 2e-6)
    and the whole drive's velocity within 1e-3 relative (measured 2.6e-4; the 24³ rule is 1.2e-3 away). A ladder
    whose product rules disagree (3³ and 4³ points) moves onto the Sobol' rungs and certifies the tail there."""
    g = np.array([0.5, 0.35, 0.25, 0.15])
    modes = [Mode.parse(x) for x in ("z0", "z0*z1*z2", "h2(z0)", "z0*z1", "h3(z0)")]
    v = np.array([0.6, 0.8, 0.0, 0.0, 0.0])
    init = tuple(x.numpy().astype(float) for x in init_neurons(120, list(g), 0.5, 7))

    def flow_with(points=None, sobol=None):
        flow = ReducedFlow(g, modes, v, 1.0, 0.5, "erf", init=init, drive="whole", exact_tail=False)
        if points is not None:
            flow.tail_points, flow.tail_sobol = points, sobol
        return flow

    flow = flow_with()
    assert flow.tail_sobol == (14, 15)
    a, W, b, _ = flow.state0
    state = (1.5 * a, 2.0 * W + 0.1 * np.sign(W), b - 0.2, np.random.default_rng(1).uniform(-0.3, 0.8, a.size))
    basis = float(((flow.v - flow.f(state)) ** 2).sum())
    ref = flow_with((40,), ())
    tail_ref = ref._tail_at(state, 0, basis)
    assert tail_ref > 5e-4
    velocity_ref = ref.velocity(state)
    first = len(flow.tail_points)
    for rung in range(first, flow._rungs()):
        assert flow._exact_target(rung) and flow._rule_label(rung).startswith("Sobol' 2^")
        assert abs(flow._tail_at(state, rung, basis) - tail_ref) < 1e-5
        flow._rung = rung - 1
        assert flow._drive_rung() == rung
        got = flow.velocity(state)
        err = sum(float(((x - y) ** 2).sum()) for x, y in zip(got, velocity_ref))
        assert err <= 1e-6 * sum(float((y**2).sum()) for y in velocity_ref)
    coarse = flow_with((3, 4), (14, 15))
    assert abs(coarse._tail_at(state, 0, basis) - coarse._tail_at(state, 1, basis)) > 2e-3 * float((v**2).sum())
    assert coarse.tail_loss(state) == pytest.approx(tail_ref, abs=1e-5)
    assert coarse._exact_target(coarse._rung)


@pytest.mark.parametrize("activation", ["erf", "relu"])
def test_exact_tail_matches_the_rules_and_certifies_the_drive(activation, monkeypatch):
    """With closed-form pair moments the tail can be exact (``‖P_T f‖²`` by pair moments, no rule;
    ``exact_tail=True``): at the moved state of the test above, against a 40³-point Gauss–Hermite rule of the full form (erf)
    within 1e-5 of L(0) (measured 2.6e-6, the rule's own error: the Sobol' rules come within 6e-7), and against the 2^15-point Sobol' rule (relu, whose kinks the product rule resolves
    slowly) within 1e-5 (measured 1.2e-6). The rules then only certify the whole drive: the drive's rule is the coarsest rung, from
    the current one, whose tail is within TAIL_TOL of the exact one; with none, a one-line stop."""
    import featureode.ode.meanfield as mf

    g = np.array([0.5, 0.35, 0.25, 0.15])
    modes = [Mode.parse(x) for x in ("z0", "z0*z1*z2", "h2(z0)", "z0*z1", "h3(z0)")]
    v = np.array([0.6, 0.8, 0.0, 0.0, 0.0])
    init = tuple(x.numpy().astype(float) for x in init_neurons(120, list(g), 0.5, 7))
    gamma = 1.0 if activation == "erf" else 0.5    # γ ≠ 1 once: P_T f carries 1/γ
    flow = ReducedFlow(g, modes, v, gamma, 0.5, activation, init=init, drive="whole", exact_tail=True)
    assert flow.exact_tail
    a, W, b, _ = flow.state0
    state = (1.5 * a, 2.0 * W + 0.1 * np.sign(W), b - 0.2, np.random.default_rng(1).uniform(-0.3, 0.8, a.size))
    basis = float(((flow.v - flow.f(state)) ** 2).sum())
    if activation == "erf":
        ref = ReducedFlow(g, modes, v, 1.0, 0.5, activation, init=init, drive="whole", exact_tail=False)
        ref.tail_points, ref.tail_sobol = (40,), ()
        tail_ref, tol = ref._tail_at(state, 0, basis), 1e-5
    else:
        tail_ref, tol = flow._tail_at(state, flow._rungs() - 1, basis), 1e-5
    assert tail_ref > 5e-4
    # product rules of 4³, 6³ and 8³ points: for erf the first two miss the tail by 6.7e-3 and 2.7e-3
    flow.tail_points, flow.tail_sobol = (4, 6, 8), (14, 15)
    assert flow._drive_rung() == 1
    exact = flow.tail_loss(state)
    assert exact == pytest.approx(tail_ref, abs=tol)
    drive = flow._drive_rung()
    assert abs(flow._tail_at(state, drive, basis) - exact) <= mf.TAIL_TOL
    assert all(abs(flow._tail_at(state, rung, basis) - exact) > mf.TAIL_TOL for rung in range(1, drive))
    if activation == "erf":
        assert drive == 2     # the 6³ rule does not certify the drive, 8³ does
    with pytest.raises(MeanFieldError, match="exact_tail=True needs closed-form pair moments"):
        ReducedFlow(g, modes, v, 1.0, 0.5, "tanh", init=init, drive="whole", exact_tail=True)
    monkeypatch.setattr(mf, "TAIL_TOL", -1.0)        # no rule can agree with the exact tail
    with pytest.raises(mf.TailError, match="drive is not resolved"):
        flow.tail_loss(state)
    monkeypatch.undo()

    def unconverged(*args, **kwargs):
        raise PopulationError("the erf pair moment did not converge")
    monkeypatch.setattr(mf, "smoothed_square", unconverged)   # a pair the quadrature cannot certify: a stop
    with pytest.raises(mf.TailError, match="exact tail could not be certified: the erf pair moment"):
        flow.tail_loss(state)
    monkeypatch.undo()
    # the default: the rules first; where the finest pair disagrees (2³/4³ by 2.7e-3, 4³/8³ by 5.7e-3 for erf) the
    # tail becomes exact, and the drive moves to the first rung that agrees with it (8³, 1.0e-3 away)
    if activation == "erf":
        fallback = ReducedFlow(g, modes, v, 1.0, 0.5, activation, init=init, drive="whole")
        fallback.tail_points, fallback.tail_sobol = (2, 4, 8), ()
        assert not fallback.exact_tail
        assert fallback.tail_loss(state) == pytest.approx(exact, rel=1e-12)
        assert fallback.exact_tail and fallback._drive_rung() == 2
        never = ReducedFlow(g, modes, v, 1.0, 0.5, activation, init=init, drive="whole", exact_tail=False)
        never.tail_points, never.tail_sobol = (2, 4, 8), ()
        with pytest.raises(mf.TailError, match="loss outside the basis is not resolved"):
            never.tail_loss(state)


def test_meanfield_tail_is_a_variant_in_its_place(tmp_path):
    """``meanfield+tail`` runs in its listed place, beside plain ``meanfield``, on the same flow: equal ``f``, a
    loss that adds the tail (never below the basis' loss)."""
    cfg = _small(ode={"variants": ["rational", "meanfield+tail", "meanfield"]})
    result = solve_config(cfg, tmp_path)
    assert list(result.variants) == ["rational", "meanfield+tail", "meanfield"]
    plain, tail = result.variants["meanfield"], result.variants["meanfield+tail"]
    assert tail.status.ok and tail.meta["info"]["variant"] == "meanfield+tail"
    np.testing.assert_allclose(tail.f, plain.f)
    assert np.all(tail.loss >= plain.loss - 1e-12) and tail.loss[-1] > plain.loss[-1] + 1e-4
    assert tail.t50 >= plain.t50
    from featureode.config.rules import ConfigError

    with pytest.raises(ConfigError, match="meanfield\\+tail"):   # an unknown name lists both mean-field names
        _small(ode={"variants": ["meanfield+tails"]})


def _whole_reference(g, modes, v, theta, t_end, steps, gamma=1.0, nodes=32):
    """The gradient flow of ``L_T = ½ E_{z_T}[(P_T f − y)²]`` in every coordinate of the given neurons (erf, d = 3,
    T = {0, 1}), by autograd: ``P_T f(z_T) = Σ a erf((ŵ_T·z_T + b)/sqrt(1 + 2 ŵ_2²))/(n γ)`` minus its value at
    t = 0 (the Gaussian average of erf over ``z_2`` in closed form), ``E`` a ``nodes²`` Gauss–Hermite rule, and
    ``dθ/dt = −γ² n diag(1, g, 1) ∇L_T``. Returns the final neurons, ``f`` on ``modes`` (projections of ``P_T f``
    by the same rule) and ``P_T f`` with the rule's nodes and weights."""
    from numpy.polynomial.hermite_e import hermegauss, hermeval

    x, w = hermegauss(nodes)
    Z = torch.tensor(np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2))
    wq = torch.tensor(np.outer(w, w).ravel() / w.sum() ** 2)
    basis = []
    for m in modes:
        col = np.ones(Z.shape[0])
        for i, n in m.items:
            unit = np.zeros(n + 1)
            unit[n] = 1.0
            col = col * hermeval(Z[:, i].numpy(), unit) / math.sqrt(math.factorial(n))
        basis.append(col)
    H = torch.tensor(np.stack(basis, 1))
    y = H @ torch.tensor(v)
    n = theta[0].shape[0]

    def F(a, W, b):
        u = (Z @ W[:, :2].T + b) / torch.sqrt(1 + 2 * W[:, 2] ** 2)
        return torch.erf(u) @ a / (n * gamma)

    F0 = F(*theta).detach()
    P = torch.tensor(np.asarray(g, float))

    def vel(th):
        a, W, b = (t.detach().requires_grad_(True) for t in th)
        loss = 0.5 * (wq * (F(a, W, b) - F0 - y) ** 2).sum()
        da, dW, db = torch.autograd.grad(loss, (a, W, b))
        return -gamma**2 * n * da, -gamma**2 * n * dW * P, -gamma**2 * n * db

    h = t_end / steps
    for _ in range(steps):
        k1 = vel(theta)
        k2 = vel(tuple(x + h / 2 * k for x, k in zip(theta, k1)))
        k3 = vel(tuple(x + h / 2 * k for x, k in zip(theta, k2)))
        k4 = vel(tuple(x + h * k for x, k in zip(theta, k3)))
        theta = tuple(x + h / 6 * (p + 2 * q + 2 * r + s) for x, p, q, r, s in zip(theta, k1, k2, k3, k4))
    fT = (F(*theta) - F0).detach()
    return theta, (H * (wq * fT)[:, None]).sum(0).numpy(), fT.numpy(), Z.numpy(), wq.numpy(), y.numpy()


def test_whole_residual_flow_is_the_gradient_flow_of_the_loss_on_T():
    """``drive="whole"`` (``meanfield+whole``) for 120 given neurons is the gradient flow of the loss of their output
    averaged over the coordinate outside T, ``½‖P_T f − y‖²``: against every coordinate moved by autograd
    (:func:`_whole_reference`, a 32²-point rule, RK4 with h = 0.02) to t = 6, f on the basis agrees to 1e-5 and the
    loss on T to 1e-5 of L(0) (measured: f 1.4e-6, loss 9e-7; the basis-driven flow of the same neurons is 0.02 away
    on f_z0). At t = 0, where the residual lies on the basis, its velocity is the basis' driving (1e-6 relative,
    measured 3e-10 with a 48-point rule). Its ``lam_max`` is the top eigenvalue of the dense kernel
    ``γ² n w^{1/2} J diag(1, g, 1) Jᵀ w^{1/2}`` with the autograd Jacobian J of ``P_T f`` at the rule's nodes (1e-3
    relative, Lanczos' tolerance). The loss on the rule falls at every step of ``h = 1.5/lam_max`` (relu; at
    ``h = 3.2/lam_max``, past RK4's bound 2.78, it does not)."""
    g = [0.5, 0.3, 0.2]
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    theta = init_neurons(120, g, 0.5, 7)
    init = tuple(x.numpy().astype(float) for x in theta)
    flow = ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "erf", init=init, drive="whole")
    # t = 0: the whole residual is the target, on the basis: the basis' driving, through a fine rule
    basis = ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "erf", init=init)
    flow.tail_points = (48, 64)
    for whole, by_modes in zip(flow.velocity(flow.state0), basis.velocity(basis.state0)):
        np.testing.assert_allclose(whole, by_modes, atol=1e-6 * np.abs(by_modes).max())
    flow = ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "erf", init=init, drive="whole")
    ts, fs, err = flow.run(6.0, t_min=0.05, h_max=0.25, integrator="rk4")
    assert err is None and ts[-1] == pytest.approx(6.0)
    ref_theta, ref_f, ref_fT, Z, wq, y = _whole_reference(g, modes, v, theta, 6.0, 300)
    assert float(((v - ref_f) ** 2).sum() / (v**2).sum()) < 0.6                      # the neurons have moved
    np.testing.assert_allclose(fs[-1], ref_f, atol=1e-5)
    loss_T = float(wq @ (ref_fT - y) ** 2) / float((v**2).sum())
    assert flow.loss(ts, fs)[-1] == pytest.approx(loss_T, abs=1e-5)
    # the kernel's top rate at the reference's final neurons, given to the flow as its own
    a, W, b = (x.detach().numpy() for x in ref_theta)
    state = (a, W[:, :2], b, np.log(W[:, 2] / init[1][:, 2]) / g[2])
    (Zr, wr, _), _ = flow._drive_rule()
    Zt = torch.tensor(Zr)
    th = tuple(x.detach().clone() for x in ref_theta)

    def PTf(a, W, b):
        return torch.erf((Zt @ W[:, :2].T + b) / torch.sqrt(1 + 2 * W[:, 2] ** 2)) @ a / (a.shape[0])

    J = torch.autograd.functional.jacobian(PTf, th)
    Jm = torch.cat([J[0], (J[1] * torch.sqrt(torch.tensor(g))).reshape(len(wr), -1), J[2]], 1).numpy()
    Js = np.sqrt(wr)[:, None] * Jm
    dense = float(np.linalg.eigvalsh(120 * Js @ Js.T).max())
    assert flow.lam_max(state) == pytest.approx(dense, rel=1e-3)
    # the loss on the rule falls at every step of the flow's own step rule
    flow2 = ReducedFlow(np.array(g), modes, v, 1.0, 0.5, "relu", init=init, drive="whole")
    s, losses = flow2.state0, []
    for _ in range(30):
        r = flow2.residual_on_rule(s)
        losses.append(float(flow2._drive_rule()[0][1] @ r**2))
        s = flow2.step(s, 1.5 / flow2.lam_max(s))
    assert np.all(np.diff(losses) < 0), losses


def test_meanfield_whole_is_a_variant_in_its_place(tmp_path):
    """``meanfield+whole`` runs in its listed place; it starts as ``meanfield+tail`` (the same velocity at t = 0,
    so the curves agree early), is recorded as driven by the whole residual, counts the tail, and its loss falls.
    Settings it cannot follow are one-line errors that name the way out."""
    cfg = _small(ode={"variants": ["rational", "meanfield+whole"]}, training={"t_max": 3.0})
    result = solve_config(cfg, tmp_path)
    assert list(result.variants) == ["rational", "meanfield+whole"]
    assert result.variants["meanfield+whole"].meta["info"]["drive"] == "whole"
    theory = kernel_theory(_small(), with_gram=True)
    whole = meanfield_trajectory(theory, 60.0, m=8, drive="whole")
    tail = meanfield_trajectory(theory, 60.0, m=8, tail=True)
    assert whole.status.ok and whole.meta["info"]["drive"] == "whole" and tail.meta["info"]["drive"] == "basis"
    assert whole.meta["info"]["variant"] == "meanfield+whole" and whole.meta["parameter_free"]
    assert whole.meta["info"]["tail"]["evaluations"] > 5
    early = whole.t <= 2.0
    np.testing.assert_allclose(whole.loss[early], tail.loss[early], atol=2e-3)
    assert np.all(np.diff(whole.loss) <= 1e-9) and whole.loss[-1] < 0.5 and whole.t50 is not None
    g, modes, v = np.array([0.5, 0.3]), [Mode.parse("z0*z1")], np.array([1.0])
    with pytest.raises(MeanFieldError, match="needs coordinates outside the target's directions"):
        ReducedFlow(g, modes, v, 1.0, 0.5, "erf", drive="whole")
    with pytest.raises(MeanFieldError, match="drive = 'all' is not 'basis'"):
        ReducedFlow(np.array([0.5, 0.3, 0.2]), modes, v, 1.0, 0.5, "erf", drive="all")


def test_rkc_against_closed_forms():
    """The damped RKC coefficients: the stability bound ``β(s)`` against Verwer et al.'s asymptote
    ``(2/3)(1 − 2ε/15)(s² − 1)`` (within 2%, s ≥ 5), |R(−z)| ≤ 1 on ``[0, β]`` for the linear test equation (one
    step of y' = −λy), second order on the harmonic oscillator (error ratio 4 per halving of h), and the stiff
    decay followed stably where RK4 at the same step explodes."""
    from featureode.ode.meanfield import RKC_DAMPING, rk4_step, rkc_coefficients, rkc_stages, rkc_step

    for s in (5, 10, 20, 40):
        beta = rkc_coefficients(s)[0]
        assert beta == pytest.approx(2 / 3 * (1 - 2 * RKC_DAMPING / 15) * (s * s - 1), rel=0.02)
        for z in np.linspace(0, beta, 200):
            (y,) = rkc_step(lambda st: (-st[0],), (np.array([1.0]),), z, s)
            assert abs(y[0]) <= 1 + 1e-12, (s, z)
    assert rkc_stages(1.9) == 2 and rkc_stages(60.0) == 10

    def oscillator(st):
        return (np.array([st[0][1], -st[0][0]]),)

    errors = []
    for h in (0.2, 0.1, 0.05):
        y = (np.array([1.0, 0.0]),)
        for _ in range(int(round(2 / h))):
            y = rkc_step(oscillator, y, h, 4)
        errors.append(abs(y[0][0] - math.cos(2.0)))
    assert 3.6 < errors[0] / errors[1] < 4.4 and 3.6 < errors[1] / errors[2] < 4.4, errors
    lam, h = 200.0, 0.1                      # h λ = 20: RK4 explodes, RKC with enough stages does not
    stiff = (np.array([1.0]),)
    y_rkc, y_rk4 = stiff, stiff
    for _ in range(50):
        y_rkc = rkc_step(lambda st: (-lam * st[0],), y_rkc, h, rkc_stages(h * lam))
        y_rk4 = rk4_step(lambda st: (-lam * st[0],), y_rk4, h)
    assert abs(y_rkc[0][0]) < 1 and abs(y_rk4[0][0]) > 1e10


def test_whole_flow_rkc_against_rk4():
    """``run(integrator="rkc")`` (the step from accuracy, the stages from ``λ_max``; the default of the whole
    residual's driving) against RK4 on the whole
    residual's flow of 120 given neurons (erf, to t = 30), both against RK4 at a fifth of the step (``c = 0.3``,
    ``h_max = 0.25``): at t = 30 the default RK4 is within 1e-5 on f, RKC within 2e-3 (measured 7e-4, its second
    order at steps up to 5) and both within 1e-4 of L(0) on the loss (measured 3e-6, 2e-6); along the curve RKC's
    loss, read linearly between its fewer steps (5 long), within 3e-3 (measured 2.4e-3). RKC takes fewer velocity
    evaluations."""
    g = np.array([0.5, 0.3, 0.2])
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    init = tuple(x.numpy().astype(float) for x in init_neurons(120, list(g), 0.5, 7))
    out = {}
    for name, options in (("fine", {"c": 0.3, "h_max": 0.25, "integrator": "rk4"}), ("rk4", {"integrator": "rk4"}),
                          ("rkc", {})):   # rkc: the whole residual's default
        flow = ReducedFlow(g, modes, v, 1.0, 0.5, "erf", init=init, drive="whole")
        calls = [0]
        velocity = flow.velocity

        def counted(state, _v=velocity, _c=calls):
            _c[0] += 1
            return _v(state)
        flow.velocity = counted  # type: ignore[method-assign]
        ts, fs, err = flow.run(30.0, **options)
        assert err is None and ts[-1] == pytest.approx(30.0)
        assert flow.integrator == options.get("integrator", "rkc")
        out[name] = (ts, fs, flow.loss(ts, fs), calls[0])
    tf, ff, lf, _ = out["fine"]
    assert lf[-1] < 0.5
    for name, tol in (("rk4", 1e-5), ("rkc", 2e-3)):
        ts, fs, loss, _ = out[name]
        np.testing.assert_allclose(fs[-1], ff[-1], atol=tol)
        assert loss[-1] == pytest.approx(lf[-1], abs=1e-4)
    np.testing.assert_allclose(np.interp(tf, out["rkc"][0], out["rkc"][2]), lf, atol=3e-3)
    assert out["rkc"][3] < out["rk4"][3]


def test_run_from_a_checkpoint_is_the_run_without_a_break(tmp_path, monkeypatch):
    """``run(checkpoint=…)`` keeps the run's place; a run stopped by a failure (here its ``progress`` raising) and
    started again on a fresh flow goes on from the place kept and returns the curve and the tail's path of the run
    without a break, bit for bit, ending with the same rung and exact-tail switch. The whole residual's flow of 120 given neurons (erf) with product
    rules of 2³, 4³, 8³ points, whose tail turns exact at t ≈ 8.5: one break before that (the rules' rung and the
    exact-tail switch still to come) and one after (both restored). A checkpoint of other settings, or a file that
    is not one, is refused in one line; the file is gone once the run has ended."""
    g = np.array([0.5, 0.3, 0.2])
    modes = [Mode.parse("z0"), Mode.parse("z0*z1")]
    v = np.array([0.6, 0.8])
    init = tuple(x.numpy().astype(float) for x in init_neurons(120, list(g), 0.5, 7))

    def make():
        flow = ReducedFlow(g, modes, v, 1.0, 0.5, "erf", init=init, drive="whole")
        flow.tail_points = (2, 4, 8)
        return flow
    ref = make()
    ts, fs, err = ref.run(30.0)
    assert err is None and ref.exact_tail and ref.resumed is None

    path = tmp_path / "flow.npz"
    for at, exact_then in ((3.0, False), (12.0, True)):
        first = make()
        with pytest.raises(_Broken):
            first.run(30.0, progress=_break_after(at), checkpoint=path, checkpoint_every=0)
        assert path.exists() and first.exact_tail == exact_then
        again = make()
        ts2, fs2, err2 = again.run(30.0, checkpoint=path)
        assert err2 is None and again.resumed is not None and 0 < again.resumed["t"] <= at
        np.testing.assert_array_equal(ts2, ts)
        np.testing.assert_array_equal(fs2, fs)
        for x, y in zip(again.tail_path, ref.tail_path):
            np.testing.assert_array_equal(x, y)
        assert again.exact_tail and again._rung == ref._rung
        assert not path.exists()
    with pytest.raises(_Broken):
        make().run(30.0, progress=_break_after(12.0), checkpoint=path, checkpoint_every=0)
    with pytest.raises(MeanFieldError, match="of another flow or other run settings; delete it") as info:
        make().run(31.0, checkpoint=path)
    assert "\n" not in str(info.value)
    from featureode.ode import meanfield as mf_module   # a run kept by other numerics is refused, not continued

    monkeypatch.setattr(mf_module, "FLOW_VERSION", mf_module.FLOW_VERSION + 1)
    with pytest.raises(MeanFieldError, match="of another flow or other run settings"):
        make().run(30.0, checkpoint=path)
    monkeypatch.undo()
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(MeanFieldError, match="cannot be read .*; delete it to start again"):
        make().run(30.0, checkpoint=path)
    with pytest.raises(MeanFieldError, match="checkpoint_every = -1 must be"):
        make().run(30.0, checkpoint=path, checkpoint_every=-1)


def test_meanfield_trajectory_goes_on_from_a_checkpoint(tmp_path):
    """``meanfield_trajectory(checkpoint=…)`` goes on from the place that a broken run of the same theory and
    settings kept, and gives the trajectory of the run without a break (``meta.info.resumed_from_t`` says from
    where)."""
    theory = kernel_theory(_small(), with_gram=True)
    whole = meanfield_trajectory(theory, 20.0, t_min=0.01, m=6)
    path = tmp_path / "run.npz"

    with pytest.raises(_Broken):
        ReducedFlow.from_theory(theory, m=6).run(20.0, t_min=0.01, progress=_break_after(5.0), checkpoint=path,
                                                 checkpoint_every=0)
    again = meanfield_trajectory(theory, 20.0, t_min=0.01, m=6, checkpoint=path)
    assert 0 < again.meta["info"]["resumed_from_t"] <= 5.0 and whole.meta["info"]["resumed_from_t"] is None
    np.testing.assert_array_equal(again.loss, whole.loss)
    np.testing.assert_array_equal(again.f, whole.f)
    assert again.status.complete and not path.exists()


def test_solve_config_goes_on_from_a_broken_meanfield_run(tmp_path, monkeypatch):
    """``solve_config(cfg, out)`` (the CLI's ``solve`` and ``compare``) keeps each mean-field variant's place in
    ``out/checkpoint_meanfield.npz``: a run broken part-way is taken up by the same call on the same folder and gives
    the curve of the run without a break, and the file is gone once the run ends. A folder claimed for another
    config refuses while the file is there, and ``--force`` removes it with the folder's other results."""
    from featureode.workflow import runs

    cfg = _small(ode={"variants": ["meanfield"]})
    whole = solve_config(cfg).variants["meanfield"]     # no folder, no checkpoint
    assert whole.meta["info"]["resumed_from_t"] is None

    real = ReducedFlow.run
    monkeypatch.setattr(ReducedFlow, "run", lambda self, *args, **kw: real(
        self, *args, **{**kw, "progress": _break_after(10.0), "checkpoint_every": 0}))
    with pytest.raises(_Broken):
        solve_config(cfg, tmp_path)
    monkeypatch.undo()
    path = tmp_path / "checkpoint_meanfield.npz"
    assert path.exists()
    again = solve_config(cfg, tmp_path).variants["meanfield"]
    assert 0 < again.meta["info"]["resumed_from_t"] <= 10.0 and again.status.complete
    np.testing.assert_array_equal(again.loss, whole.loss)
    np.testing.assert_array_equal(again.f, whole.f)
    assert not path.exists()

    folder = tmp_path / "run"
    runs.prepare(folder, cfg)
    runs.release(folder)
    (folder / "checkpoint_meanfield_whole.npz").write_bytes(b"a place kept by a run of cfg")
    other = _small(ode={"variants": ["meanfield"]}, network={"richness": 0.3})
    with pytest.raises(FileExistsError, match="holds results of a different config"):
        runs.prepare(folder, other)
    runs.prepare(folder, other, force=True)
    runs.release(folder)
    assert not (folder / "checkpoint_meanfield_whole.npz").exists()


def test_meanfield_progress_bar(capsys):
    """``progress=True`` shows a bar over t on stderr (the CLI's ``solve``/``compare`` without ``--quiet``); the
    curve is the one without it. ``ReducedFlow.run`` calls its ``progress`` with each step's t, up to t_max."""
    theory = kernel_theory(_small(), with_gram=True)
    quiet = meanfield_trajectory(theory, 5.0, m=6)
    assert capsys.readouterr().err == ""
    shown = meanfield_trajectory(theory, 5.0, m=6, progress=True)
    err = capsys.readouterr().err
    assert "meanfield: " in err and "t = 0/5" in err, err
    np.testing.assert_array_equal(quiet.loss, shown.loss)
    flow = ReducedFlow.from_theory(theory, m=6)
    seen: list[float] = []
    ts, _, _ = flow.run(5.0, progress=seen.append)
    assert seen == list(ts[1:]) and seen[-1] == pytest.approx(5.0)


def test_whole_residual_flow_does_not_read_the_basis():
    """``meanfield+whole`` on the extended basis and on the target basis: the same neurons' flow (f on the target's
    modes equal to 1e-9 at every step), and the target basis' loss is the extended one less its modes outside T
    (:meth:`ReducedFlow.loss_on_T`), to 1e-9 of L(0) where the tail was evaluated. The extended basis holds modes outside T here (z0*z1*h2(z3)),
    so the two losses differ."""
    runs = {}
    for basis in ("extended", "target"):
        theory = kernel_theory(_small(ode={"basis": basis}), with_gram=True)
        flow = ReducedFlow.from_theory(theory, m=8, drive="whole")
        ts, fs, err = flow.run(40.0)
        assert err is None
        runs[basis] = (flow, list(theory.modes), ts, fs)
    ext, ext_modes, ts, fs = runs["extended"]
    tgt, tgt_modes, ts_t, fs_t = runs["target"]
    assert len(ts) == len(ts_t) and np.allclose(ts, ts_t, rtol=0, atol=1e-12)
    cols = [ext_modes.index(m) for m in tgt_modes]
    np.testing.assert_allclose(fs[:, cols], fs_t, atol=1e-9)
    outside = ext.loss(ts, fs) - ext.loss_on_T(ts, fs)
    assert outside.max() > 1e-4                               # modes outside T with a part in the loss
    # equal where the tail was evaluated; between, each interpolates the tail over its own basis' part (1e-3)
    at = np.isin(ts, ext.tail_path[0])
    assert at.sum() > 10 and np.allclose(ext.tail_path[0], tgt.tail_path[0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(ext.loss_on_T(ts, fs)[at], tgt.loss(ts_t, fs_t)[at], atol=1e-9)
    np.testing.assert_allclose(ext.loss_on_T(ts, fs), tgt.loss(ts_t, fs_t), atol=1e-3)
    np.testing.assert_allclose(tgt.loss_on_T(ts_t, fs_t), tgt.loss(ts_t, fs_t), atol=0)


def test_tables_reach_far_biases(monkeypatch, tmp_path):
    """The tables of means reach |b| ≈ 10⁴ (a neuron that learns a linear part of the target goes far out in b: a
    wide2 SiLU bias passed the first table's 100). Beyond |b| = 100 they hold the activation's asymptotes, which an
    independent closed form gives: SiLU ``x sigmoid(x)`` is ``x`` up to ``x e^{−x}`` on the right and 0 on the left,
    tanh is ±1 up to ``2e^{−2|x|}``, so for |b| ≥ 150 and s ≤ 10 (``e^{−b²/8s²}`` of the mass where they are not)
    ``m_0 = max(b, 0)``, ``m_1 = [b > 0]`` and ``m_2 = 0`` for SiLU (``m_k = E σ^{(k)}(b + sξ)``), ``m_0 = sign b``
    and ``m_1 = 0`` for tanh, to rounding. Points between, at every s, match the quadrature that fills the tables
    as the points within |b| ≤ 100 do. (The package's b grid, a shorter s grid of 40 points to keep the test
    fast.)"""
    from featureode.calculus.activations import get_activation

    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(MeanTable, "S", np.geomspace(0.02, 10.0, 40))
    monkeypatch.setattr(MeanTable, "_splines", {})
    assert MeanTable.B[0] == -MeanTable.B[-1] and MeanTable.B[-1] > 1e4
    rng = np.random.default_rng(5)
    b = rng.uniform(150, 1e4, 3000) * rng.choice([-1, 1], 3000)
    s = np.exp(rng.uniform(math.log(0.02), math.log(10.0), 3000))
    silu, tanh = MeanTable(get_activation("silu")), MeanTable(get_activation("tanh"))
    m0, m1, m2 = silu.many((0, 1, 2), b, s)
    np.testing.assert_allclose(m0, np.maximum(b, 0), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(m1, (b > 0).astype(float), rtol=0, atol=1e-9)
    np.testing.assert_allclose(m2, 0, atol=1e-9)
    t0, t1 = tanh.many((0, 1), b, s)
    np.testing.assert_allclose(t0, np.sign(b), rtol=0, atol=1e-9)
    np.testing.assert_allclose(t1, 0, atol=1e-9)
    for table in (silu, tanh):
        quad = table.act.mean_numpy(1)
        far = rng.uniform(100, 1e4, 2000) * rng.choice([-1, 1], 2000)
        near = rng.uniform(-100, 100, 2000)
        ss = np.exp(rng.uniform(math.log(0.02), math.log(10.0), 2000))
        err_far = np.abs(table(1, far, ss) - quad(far, ss)).max()
        err_near = np.abs(table(1, near, ss) - quad(near, ss)).max()
        assert err_far <= max(err_near, 1e-9) and err_near < 1e-4, (table.act.name, err_far, err_near)
    with pytest.raises(MeanFieldError, match=r"left the table of m_k of silu .* the table holds \|b\| ≤ 10151"):
        silu(0, np.array([2e4]), np.array([1.0]))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_table_splines_are_fitpacks_surfaces(backend, monkeypatch):
    """The compiled evaluator of the tables' bicubic splines (both backends of ``bspline_surface``) against
    FITPACK's own evaluator (``RectBivariateSpline.ev``) on the package's grid: random points, the grid's nodes
    (where the spline interpolates the table) and the four corners; three orders read in one pass."""
    from scipy.interpolate import RectBivariateSpline

    from featureode.kernel import loops

    monkeypatch.setitem(loops._CHOSEN, "_bspline_surface", backend)
    B, S = MeanTable.B, MeanTable.S
    rng = np.random.default_rng(3)
    tables = [np.tanh(B[:, None] / (1 + k)) * np.log(S[None, :]) + k * np.cos(B[:, None] * S[None, :] / 50)
              for k in range(3)]
    splines = [RectBivariateSpline(B, S, v, kx=3, ky=3) for v in tables]
    tx, ty, _ = splines[0].tck
    coefs = np.stack([np.asarray(sp.tck[2]).reshape(tx.size - 4, ty.size - 4) for sp in splines])
    bb, ss = np.meshgrid(B, S, indexing="ij")
    x = np.concatenate([rng.uniform(B[0], B[-1], 5000), bb.ravel(), [B[0], B[0], B[-1], B[-1]]])
    y = np.concatenate([np.exp(rng.uniform(math.log(S[0]), math.log(S[-1]), 5000)), ss.ravel(),
                        [S[0], S[-1], S[0], S[-1]]])
    got = loops.bspline_surface(tx, ty, coefs, x, y)
    for k, sp in enumerate(splines):
        np.testing.assert_allclose(got[k], sp.ev(x, y), rtol=0, atol=1e-13 * np.abs(tables[k]).max())
        np.testing.assert_allclose(got[k, 5000:5000 + bb.size], tables[k].ravel(), rtol=0, atol=1e-10)
    # one s per row (a neuron at every node of a rule): the spline reduced per row, then read
    monkeypatch.setitem(loops._CHOSEN, "_bspline_rows", backend)
    xr, yr = x[:5000].reshape(50, 100), y[:50]
    rows = loops.bspline_rows(tx, ty, coefs, xr, yr)
    out = np.full(rows.shape, np.nan)
    assert loops.bspline_rows(tx, ty, coefs, xr, yr, out=out) is out and np.array_equal(out, rows)
    with pytest.raises(ValueError, match="out must be a C-contiguous float64 array"):
        loops.bspline_rows(tx, ty, coefs, xr, yr, out=np.empty(rows.shape, dtype=np.float32))
    for k, sp in enumerate(splines):
        np.testing.assert_allclose(rows[k], sp.ev(xr, np.repeat(yr, 100).reshape(50, 100)), rtol=0,
                                   atol=1e-13 * np.abs(tables[k]).max())
