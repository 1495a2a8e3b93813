"""Deterministic second-order constants (:mod:`featureode.kernel.second_order`) against independent oracles: the
kernel's exact ``λ_β(0)``, the Monte Carlo of :mod:`featureode.kernel.second_order_mc` (Stein forms + central
differences, with its standard errors), a per-neuron RK4 integration of the flow with projections by Gauss–Hermite
quadrature over ``z`` and gradients by autograd, and the linear activation's closed forms."""
from __future__ import annotations

import math

import numpy as np
import pytest

from _per_neuron import PerNeuron, init_neurons
from featureode.calculus.hermite import Mode
from featureode.kernel.network import Network
from featureode.kernel.second_order import network_second_order, second_order_constants
from featureode.kernel.second_order_mc import second_order_constants as mc_constants
from featureode.kernel.theory import network_eigenvalues

G3 = np.array([0.25, 0.15, 0.1])


# tanh (27 s of CI here) runs with the slow tests; test_kernel checks tanh's λ against Monte Carlo
@pytest.mark.parametrize("act", ["relu", "erf", pytest.param("tanh", marks=pytest.mark.slow)])
def test_lambda0_equals_the_kernel_eigenvalue(act):
    g = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05])
    net = Network.build(act, g, 0.5)
    modes = [Mode.parse(m) for m in ("z0", "z0*z1", "h2(z1)", "h3(z0)", "z0*h2(z3)")]
    so = network_second_order(net, modes, [0])
    np.testing.assert_allclose(so.lambda0, network_eigenvalues(net, modes), rtol=1e-10)
    np.testing.assert_allclose(sum(so.lambda0_parts.values()), so.lambda0, rtol=1e-12)
    np.testing.assert_allclose(sum(so.S_parts.values()), so.S, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("act, modes", [("erf", ("z0", "z0*z1")),
                                        pytest.param("tanh", ("z0", "h2(z1)", "z0*z1"), marks=pytest.mark.slow)])
def test_constants_agree_with_the_monte_carlo_within_its_error_bars(act, modes):
    exact = second_order_constants(modes, G3, act, 0.5, drivers=[0])
    mc = mc_constants(modes, G3, act, 0.5, drivers=[0], n_neurons=100_000, seed=1)
    z = np.abs(exact.S[:, 0] - mc.S[:, 0]) / mc.S_stderr[:, 0]
    assert np.all(z < 4), (exact.S[:, 0], mc.S[:, 0], mc.S_stderr[:, 0])
    np.testing.assert_allclose(exact.lambda0, mc.lambda0, rtol=0.05)


def test_linear_activation_has_the_closed_forms():
    # linear σ: λ_{z_i} = 2 g_i; driven by z_0, ⟨a²⟩ and ⟨ŵ_0²⟩/g_0 grow as cosh(2γ sqrt(g_0) D): S_{z0z0} = 2 g_0,
    # S_{z1z0} = g_0 (ode/terms.py); the parts: u_2 = g_0 u_0 on the driving mode, so U = V = g_0
    so = second_order_constants(["z0", "z1"], G3, "u", 0.5)
    np.testing.assert_allclose(so.S, [[2 * G3[0], G3[1]], [G3[0], 2 * G3[1]]], rtol=1e-10)
    np.testing.assert_allclose([so.U[0, 0, 0], so.V[0, 0]], [G3[0], G3[0]], rtol=1e-10)
    np.testing.assert_allclose(so.lambda0, 2 * G3[:2], rtol=1e-10)


def test_one_traced_algebra_serves_every_spectrum():
    # the flow algebra of a mode set is traced once with the g_i as symbols (second_order._trace) and reused for
    # every spectrum: the closed forms of the linear activation and the kernel's exact λ_β(0) hold on each spectrum
    # of a sequence that shares one trace (spectra of different dimension and order included)
    from featureode.kernel import second_order as so_mod

    so_mod._trace.cache_clear()
    so_mod._cached.cache_clear()   # the constants themselves are cached per spectrum too
    for g in (G3, np.array([0.05, 0.6, 0.3, 0.2, 0.1]), np.array([1.3, 0.01, 0.4])):
        so = second_order_constants(["z0", "z1"], g, "u", 0.5)
        np.testing.assert_allclose(so.S, [[2 * g[0], g[1]], [g[0], 2 * g[1]]], rtol=1e-10)
        np.testing.assert_allclose([so.U[0, 0, 0], so.V[0, 0]], [g[0], g[0]], rtol=1e-10)
    assert so_mod._trace.cache_info().hits == 2
    modes = [Mode.parse(m) for m in ("z0", "z0*z1", "h2(z1)", "h3(z0)")]
    for g in (np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07]), np.array([0.1, 0.35, 0.2, 0.02, 0.3, 0.05])):
        net = Network.build("relu", g, 0.5)
        np.testing.assert_allclose(network_second_order(net, modes, [0]).lambda0, network_eigenvalues(net, modes),
                                   rtol=1e-10)
    assert so_mod._trace.cache_info().hits == 3


def test_the_traced_algebra_is_kept_on_disk_and_a_damaged_entry_is_traced_again(tmp_path, monkeypatch):
    # a later process reads the trace from the disk cache (no second trace), and gets the same constants; a damaged
    # entry is traced again and replaced, without an error
    from featureode.kernel import second_order as so_mod

    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    so_mod._trace.cache_clear()
    net = Network.build("erf", G3, 0.5)
    modes = [Mode.parse(m) for m in ("z0", "z0*z1", "h2(z1)")]
    first = network_second_order(net, modes, [0])
    files = list(tmp_path.glob("second_order_trace_*.pickle"))
    assert len(files) == 1
    so_mod._trace.cache_clear()
    real = so_mod._traced
    monkeypatch.setattr(so_mod, "_traced", lambda *a: pytest.fail("traced again although the disk cache has it"))
    again = network_second_order(net, modes, [0])
    np.testing.assert_array_equal(again.S, first.S)
    np.testing.assert_array_equal(again.lambda0, first.lambda0)
    files[0].write_bytes(b"not a pickle")
    so_mod._trace.cache_clear()
    monkeypatch.setattr(so_mod, "_traced", real)
    np.testing.assert_array_equal(network_second_order(net, modes, [0]).S, first.S)
    assert files[0].read_bytes() != b"not a pickle"


def test_traces_on_disk_stay_within_their_budget_least_recently_used_first_out(tmp_path, monkeypatch):
    # FEATUREODE_TRACE_CACHE_MB bounds the traces kept on disk: writing a new one removes the least recently used
    # (a disk hit refreshes an entry), never the one just written; a bad value is one clear error
    import os
    import time

    from featureode.kernel import second_order as so_mod
    from featureode.kernel.growth import GrowthError

    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    net = Network.build("erf", G3, 0.5)
    sets = [[Mode.parse(m) for m in ms] for ms in (("z0",), ("z0", "z1"), ("z0", "h2(z1)"))]
    so_mod._trace.cache_clear()
    for modes in sets[:2]:
        network_second_order(net, modes, [0])
    first, second = sorted(tmp_path.glob("second_order_trace_*.pickle"), key=lambda p: p.stat().st_mtime)
    now = time.time()
    os.utime(first, (now - 200, now - 200))
    os.utime(second, (now - 100, now - 100))   # the second is the newer ...
    so_mod._trace.cache_clear()
    network_second_order(net, sets[0], [0])  # ... until the first is read from disk again (refreshed)
    assert first.stat().st_mtime > second.stat().st_mtime
    probe = tmp_path / "probe"     # the size the third trace will have
    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(probe))
    so_mod._trace.cache_clear()
    network_second_order(net, sets[2], [0])
    (third,) = probe.glob("second_order_trace_*.pickle")
    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    budget = first.stat().st_size + third.stat().st_size + min(first.stat().st_size, second.stat().st_size) - 1
    monkeypatch.setenv("FEATUREODE_TRACE_CACHE_MB", str(budget / 2**20))
    so_mod._trace.cache_clear()
    network_second_order(net, sets[2], [0])
    left = set(tmp_path.glob("second_order_trace_*.pickle"))
    assert second not in left and len(left) == 2 and first in left   # the new one, and the one used last that fits
    monkeypatch.setenv("FEATUREODE_TRACE_CACHE_MB", "0")
    assert so_mod.prune_traces(tmp_path, so_mod.trace_cache_limit(), keep=first) == [p for p in left if p != first]
    assert set(tmp_path.glob("second_order_trace_*.pickle")) == {first}
    monkeypatch.setenv("FEATUREODE_TRACE_CACHE_MB", "lots")
    with pytest.raises(GrowthError, match="FEATUREODE_TRACE_CACHE_MB must be a number of megabytes >= 0, got 'lots'"):
        so_mod.trace_cache_limit()


def test_learning_rate_weights_enter_the_metric():
    # linear σ, one readout weight a and one direction: k = η_a ŵ² + η_w g a²; the flow rotates (a, ŵ) with
    # rapidity sqrt(η_a η_w g), and λ(D)/λ(0) = ... second order: S = 2 η_a η_w g (independent of the mix)
    g = np.array([0.4])
    for rates in ((1, 1, 1), (2.0, 0.5, 1.0), (0.3, 3.0, 0.0)):
        so = second_order_constants(["z0"], g, "u", 0.5, rates=rates)
        assert so.S[0, 0] == pytest.approx(2 * rates[0] * rates[1] * g[0], rel=1e-10)
        assert so.lambda0[0] == pytest.approx((rates[0] + rates[1]) * g[0], rel=1e-10)


# ------------------------------------------------------------------------------------------------------------------
# independent oracle: RK4 of the per-neuron flow (theory_tests/_per_neuron.py)
# ------------------------------------------------------------------------------------------------------------------
def _rk4_coefficient(beta: Mode, alpha: Mode, n: int, seed: int) -> tuple[float, float]:
    """``[ε²] E[k_β(θ(ε))]`` from RK4 at ε = ±0.05, ±0.1 (even part, Richardson), mean and standard error over ``n``
    sampled init neurons."""
    theta0 = init_neurons(n, G3, 0.5, seed)
    nr = PerNeuron(G3)
    k0 = nr.kernel(beta, *theta0)
    x = {}
    for eps in (0.05, 0.1):
        up, down = (nr.kernel(beta, *nr.integrate(alpha, theta0, e, steps=4)) for e in (eps, -eps))
        x[eps] = (up + down - 2 * k0) / (2 * eps**2)
    per = ((4 * x[0.05] - x[0.1]) / 3).numpy()
    return float(per.mean()), float(per.std(ddof=1) / math.sqrt(n))


@pytest.mark.parametrize("alpha, beta", [("z0", "z0"), ("z0", "z0*z1"), ("z0*z1", "z0")])
def test_constants_agree_with_an_rk4_integration_of_the_per_neuron_flow(alpha, beta):
    a, b = Mode.parse(alpha), Mode.parse(beta)
    so = second_order_constants([a, b] if a != b else [a], G3, "erf", 0.5, drivers=[0])
    row = 0 if a == b else 1
    mean, err = _rk4_coefficient(b, a, n=4000, seed=5)
    exact = so.S[row, 0] * so.lambda0[row]
    assert abs(exact - mean) < 4 * err + 1e-6, (exact, mean, err)


def test_the_parts_U_and_V_agree_with_the_per_neuron_gradient_of_an_rk4_flow():
    """``U = E|u_1|²/λ`` and ``V = E[u_0·u_2]/λ`` separately (a swap of the two keeps ``S`` and would pass the test
    above): ``u(ε) = P^{1/2}∇φ_β(θ(ε))`` from RK4 of the per-neuron flow at ε = ±0.05, ±0.1, ``u_1`` and ``u_2`` by
    Richardson-extrapolated central differences, averaged over sampled neurons (mean ± standard error)."""
    a, b = Mode.parse("z0"), Mode.parse("z0*z1")
    so = second_order_constants([a, b], G3, "erf", 0.5, drivers=[0])
    U, V = so.U[1, 0, 0] * so.lambda0[1], so.V[1, 0] * so.lambda0[1]
    assert abs(U - V) > 0.2 * abs(U), (U, V)      # a swap would be visible
    n = 4000
    theta0 = init_neurons(n, G3, 0.5, 11)
    nr = PerNeuron(G3)
    u0 = nr.gradient(b, *theta0)
    d1, d2 = {}, {}
    for eps in (0.05, 0.1):
        up, down = (nr.gradient(b, *nr.integrate(a, theta0, e, steps=4)) for e in (eps, -eps))
        d1[eps], d2[eps] = (up - down) / (2 * eps), (up + down - 2 * u0) / eps**2
    u1 = (4 * d1[0.05] - d1[0.1]) / 3
    u2 = (4 * d2[0.05] - d2[0.1]) / 3
    per_U, per_V = (u1**2).sum(1).numpy(), (u0 * u2).sum(1).numpy()
    for name, exact, per in (("U", U, per_U), ("V", V, per_V)):
        mean, err = per.mean(), per.std(ddof=1) / math.sqrt(n)
        assert abs(exact - mean) < 4 * err, (name, exact, mean, err)
        assert 4 * err < 0.5 * abs(U - V), (name, err, U, V)     # the bar is tight enough to tell U from V


@pytest.mark.parametrize("loops", ["numba", "numpy"])
def test_constants_do_not_depend_on_what_was_computed_before(loops, monkeypatch):
    """The growth's averages are each one sum over their own law's window of rows (``Averager.evaluate``,
    ``loops.window_sums``): the constants of one mode set are bitwise the same fresh and after histories that fill
    the shared caches with other mode sets, on both backends of the kernel's loops. ReLU with σ_b > 0, so that the
    histories' h3/h4 modes (singular at |ŵ| → 0) extend the cached laws of |ŵ|² below the rows this set needs. A
    guard: the gathered matrix product this replaced passed it on this machine's BLAS too, but nothing there
    promised a sum independent of the batch's window."""
    monkeypatch.setenv("FEATUREODE_KERNEL_LOOPS", loops)
    from featureode.kernel import second_order as so_mod
    from featureode.kernel.theory import clear_caches

    g = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07])
    modes = [Mode.parse(m) for m in ("z0", "z0*z1", "h2(z1)")]

    def fresh(history):
        clear_caches()
        so_mod._cached.cache_clear()
        for ms in history:
            network_second_order(Network.build("relu", g, 0.5), [Mode.parse(m) for m in ms], [0])
        return network_second_order(Network.build("relu", g, 0.5), modes, [0])

    try:
        want = fresh([])
        for history in ([("h4(z0)", "z0*z1*z2")], [("z1", "h3(z2)"), ("z0*z2", "h2(z0)*z1")]):
            got = fresh(history)
            for name in ("S", "U", "V", "lambda0"):
                assert np.array_equal(getattr(got, name), getattr(want, name)), (history, name)
    finally:   # leave no numbers of the forced backend in the caches for the tests that follow
        clear_caches()
        so_mod._cached.cache_clear()


@pytest.mark.parametrize("loops", ["numba", "numpy"])
def test_each_growth_average_alone_equals_it_in_its_batch(loops, monkeypatch):
    """Every average the second-order growth records (ReLU, σ_b = 0.5, modes with h3/h4, so that about a third of
    them sit in a law whose window a more singular product of its batch set) evaluated alone, in a record of its own,
    is bitwise the one evaluated with its whole batch (``Averager.evaluate`` sums each in row order over its law's
    window; ``loops.window_sums``)."""
    from featureode.kernel import second_order as so_mod
    from featureode.kernel.growth import Averager, Rates, Recorded

    monkeypatch.setenv("FEATUREODE_KERNEL_LOOPS", loops)
    net = Network.build("relu", np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07]), 0.5)
    averager = Averager(net)
    modes = tuple(Mode.parse(m) for m in ("z0", "h3(z0)", "h4(z1)", "z0*z1*z2"))
    rec = so_mod._trace(modes, (0,), Rates(), False, tuple(sorted(averager.moments.items()))).recorded

    def record_of(codes: np.ndarray) -> Recorded:   # one request per average, coefficient 1, no g factor
        k = codes.size
        return Recorded(k, np.arange(k), np.ones(k), np.zeros(0, dtype=np.intp), np.zeros((1, 0)),
                        np.zeros(k, dtype=np.intp), np.arange(k), rec.groups, rec.ms_list, rec.key_group[codes],
                        rec.key_ms[codes])

    codes = np.arange(rec.key_group.size)
    batch = Averager(net).evaluate(record_of(codes))
    sing = np.array([averager.singular_power(ms) for ms in rec.ms_list])
    e_group = np.zeros(len(rec.groups), dtype=int)
    np.maximum.at(e_group, rec.key_group, sing[rec.key_ms])
    assert np.sum(sing[rec.key_ms] < e_group[rec.key_group]) > codes.size // 5   # the case the test is about
    for c in codes:
        alone = Averager(net).evaluate(record_of(np.array([c])))[0]
        assert alone == batch[c], (loops, int(c), alone, batch[c])
