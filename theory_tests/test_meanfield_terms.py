"""The typeset mean-field equations (``featureode.ode.meanfield_terms``) are the ones ``ReducedFlow`` integrates.

Each velocity expression is evaluated from its SymPy form (``lambdify``; its ``E_z`` by a Gauss–Hermite rule on
``z_T``; ReLU's smoothed derivatives written out here: ``m_0 = u Φ(u/s) + s φ(u/s)``, ``m_1 = Φ(u/s)``,
``m_2 = φ(u/s)/s``) at a moved state of 40 given neurons, and compared with :meth:`ReducedFlow.velocity`:

* ``meanfield+whole`` on the flow's own rule, with ``r`` the flow's residual at its nodes: the same sums, so to
  rounding (1e-10 relative);
* ``meanfield`` with ``r = Σ_{α∈S} (v_α − f_α) h_α(z)`` on a 96²-point rule, against the flow's Stein form
  ``Σ_α R_α ∇(a A_α)`` (no rule at all): an independent route, to the rule's error (1e-6 relative; measured
  6e-8, and 1e-4 at 48² points, 1e-5 at 64²: the rule converges to the Stein form).

The definitions of ``f_α`` and of the loss are checked the same way (:func:`test_whole_loss_and_f_are_the_typeset_ones`).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp
from numpy.polynomial.hermite_e import hermegauss, hermeval
from scipy.stats import norm

from featureode.calculus.hermite import Mode
from featureode.export.latex import meanfield_latex
from featureode.ode import meanfield_terms as mf
from featureode.ode.meanfield import ReducedFlow

G = np.array([0.5, 0.3, 0.2, 0.1])
MODES = [Mode.parse(x) for x in ("z0", "z0*z1", "h2(z0)", "h2(z1)", "h3(z0)*z1", "h2(z2)")]
V = np.array([0.6, 0.8, 0.0, 0.0, 0.0, 0.0])
RATES = (0.7, 1.3, 0.9)


def _relu_means(u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = u / s
    return u * norm.cdf(x) + s * norm.pdf(x), norm.cdf(x), norm.pdf(x) / s


def _flow(drive: str) -> tuple[ReducedFlow, tuple]:
    rng = np.random.default_rng(3)
    n = 40
    W = rng.normal(size=(n, G.size)) * np.sqrt(G)
    W[:, 2:] = np.sign(W[:, 2:]) * np.sqrt(G[2:]) * (1 + np.abs(W[:, 2:]))   # s_⊥ ≥ 0.5: ridges a rule resolves
    init = (rng.normal(size=n), W, 0.5 * rng.normal(size=n))
    flow = ReducedFlow(G, MODES, V, 0.8, 0.5, "relu", rates=RATES, init=init, drive=drive)
    a, W, b, _ = flow.state0   # a moved state: every coordinate changed
    state = (1.2 * a, 1.5 * W + 0.1, b - 0.2, rng.uniform(-0.3, 0.5, size=n))
    return flow, state


def _typeset_velocity(flow: ReducedFlow, state: tuple, Z: np.ndarray, wq: np.ndarray,
                      r_nodes: np.ndarray) -> tuple[np.ndarray, ...]:
    """:data:`meanfield_terms.VELOCITY` at every neuron, ``E_z`` as ``Σ_q wq_q ·`` at the nodes ``Z``."""
    a, W, b, C = state
    s = np.sqrt(flow._perp(C, 1))[:, None]
    U = W @ Z.T + b[:, None]
    M = _relu_means(U, s)
    M_syms = sp.symbols("M0:3")
    R, Zi = sp.symbols("R Zi")
    out = []
    for name, expr in mf.VELOCITY.items():
        pre, body = mf.split_expectation(expr)
        body = body.subs({mf.m[k](mf.u, mf.s_perp): M_syms[k] for k in range(3)}).subs({mf.r: R, mf.z_i: Zi})
        f_body = sp.lambdify([*M_syms, R, Zi], body, "numpy")
        f_pre = sp.lambdify([mf.a, mf.gamma, mf.eta_a, mf.eta_w, mf.eta_b, mf.g_i], pre, "numpy")
        if name == r"\hat{w}_i":
            cols = [f_pre(a, flow.gamma, *RATES, flow.gT[j] / RATES[1])
                    * (f_body(*M, r_nodes[None, :], Z[None, :, j]) @ wq) for j in range(len(flow.T))]
            out.append(np.stack(cols, 1))
        else:
            out.append(np.broadcast_to(f_pre(a, flow.gamma, *RATES, 1.0), a.shape)
                       * (np.broadcast_to(f_body(*M, r_nodes[None, :], 0.0), U.shape) @ wq))
    return tuple(out)


def _rule(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = hermegauss(n)
    Z = np.stack([g.ravel() for g in np.meshgrid(*[x] * k, indexing="ij")], 1)
    wq = np.prod(np.stack([g.ravel() for g in np.meshgrid(*[w / w.sum()] * k, indexing="ij")], 1), 1)
    return Z, wq


def _close(got: tuple, want: tuple, rtol: float) -> None:
    for g_, w_ in zip(got, want):
        scale = max(float(np.abs(w_).max()), 1e-300)
        assert float(np.abs(np.asarray(g_) - w_).max()) <= rtol * scale, (float(np.abs(g_ - w_).max()), scale)


def test_whole_velocity_is_the_typeset_one() -> None:
    flow, state = _flow("whole")
    (Z, wq, _), _ = flow._drive_rule()
    r_nodes = flow.residual_on_rule(state)
    _close(_typeset_velocity(flow, state, Z, wq, r_nodes), flow.velocity(state), 1e-10)


def test_basis_velocity_is_the_typeset_one_by_an_independent_rule() -> None:
    flow, state = _flow("basis")
    Z, wq = _rule(len(flow.T), 96)
    R = flow.v - flow.f(state)
    r_nodes = np.zeros(len(wq))
    pos = {i: j for j, i in enumerate(flow.T)}
    for mode, coeff in zip(flow.modes, R):
        term = np.full(len(wq), float(coeff))
        for i, order in mode.items:
            unit = np.zeros(order + 1)
            unit[order] = 1.0
            term *= hermeval(Z[:, pos[i]], unit) / math.sqrt(math.factorial(order))
        r_nodes += term
    _close(_typeset_velocity(flow, state, Z, wq, r_nodes), flow.velocity(state), 1e-6)


def test_whole_loss_and_f_are_the_typeset_ones() -> None:
    """:data:`DEFINITIONS`' ``f_α = E_z[(P_T f) h_α]`` on a 96²-point rule is the flow's Stein projection on every
    mode in T (1e-8); :data:`LOSS` of ``meanfield+whole``, ``(E_z[(y − P_T f)²] + Σ_{α ⊄ T} f_α²)/Σ v²`` on that
    rule, is the flow's basis loss plus its certified tail (:meth:`ReducedFlow.tail_loss`, rules of 18² and 24²
    points: 1e-4 of L(0), within the tail's tolerance 2e-3)."""
    flow, state = _flow("whole")
    Z, wq = _rule(len(flow.T), 96)
    PTf = (flow._ridge_mean(state, Z) - flow._ridge_mean(flow.state0, Z)) / flow.gamma
    h = [np.prod([hermeval(Z[:, flow.T.index(i)], np.eye(n + 1)[n]) / math.sqrt(math.factorial(n))
                  for i, n in mode.items], 0) for mode in flow.modes]
    np.testing.assert_allclose([wq @ (PTf * hk) for hk in h], flow.f(state), atol=1e-8)
    y = Z[:, 0] * 0.6 + Z[:, 0] * Z[:, 1] * 0.8
    f_all = flow.f_all(state)
    out_T = [k for k in range(len(MODES)) if k not in flow.keep]
    assert out_T == [5] and abs(f_all[5]) > 1e-3    # h2(z2): a mode outside T the loss must count
    typeset = (float(wq @ (y - PTf) ** 2) + float((f_all[out_T] ** 2).sum())) / float((V**2).sum())
    basis_loss = float(((V - f_all) ** 2).sum()) / float((V**2).sum())
    assert abs(typeset - (basis_loss + flow.tail_loss(state))) < 1e-4


def test_derive_typesets_only_the_mean_field_variants_named() -> None:
    assert meanfield_latex(["rational", "lazy"]) == ""
    text = meanfield_latex(["rational", "meanfield+whole"])
    assert r"\texttt{meanfield+whole}" in text and r"\texttt{meanfield}:" not in text
    assert r"y{\left(z \right)} - (P_T f)(z)" in text and r"\frac{dC}{dt}" in text
