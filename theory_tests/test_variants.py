"""The second-order closures: constants against an independent integration of the per-neuron flow, exact cases,
the eigenvalue-law mechanics of the ODE, and their LaTeX."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import sympy as sp

from _ode_theories import make_theory
from featureode.ode import terms as ode
from featureode.ode.compile import compile_system
from _per_neuron import PerNeuron, init_neurons
from featureode.calculus.hermite import Mode
from featureode.export.latex import expr_latex, system_latex, tex_text
from featureode.kernel.second_order_mc import second_order_constants
from featureode.ode.solve import solve_variant, system_inputs
from featureode.ode.variants import Variant, VariantError, closure_names

G3 = np.array([0.25, 0.15, 0.1])


# ------------------------------------------------------------------------------------------------------------------
# independent integration: projections by Gauss–Hermite quadrature over z, gradients by autograd, flow by RK4
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("driver", ["z0", "z0*z1"])
def test_second_order_constants_match_an_integration_of_the_per_neuron_flow(driver):
    """``S_{βα}`` from the Stein forms + central differences equals the ε² coefficient of ``E[k_β(θ(ε))]`` with
    ``θ(ε)`` integrated by RK4 from a quadrature + autograd vector field (even part in ε, Richardson over
    ε = 0.05, 0.1), on the
    same 300 neurons; and both agree with λ_β(0). The Monte Carlo error bar of S (which the two share) is stated
    by the package; the methods must agree far inside it."""
    modes = [Mode.parse(m) for m in ("z0", "z0*z1")]
    col = [str(m) for m in modes].index(driver)
    n, sb, seed = 300, 0.5, 3
    so = second_order_constants(modes, G3, "erf", sb, drivers=[col], n_neurons=n, seed=seed)
    quad = PerNeuron(G3, "erf", n_nodes=20)
    theta0 = init_neurons(n, G3, sb, seed)   # the init neurons second_order_constants draws (same order)
    for row, beta in enumerate(modes):
        lam0 = quad.kernel(beta, *theta0).mean().item()
        assert lam0 == pytest.approx(so.lambda0[row], rel=1e-4)   # quadrature error of the 20-node rule
        x = {}
        for eps in (0.05, 0.1):     # even part in ε: the odd orders vanish only on average over a ↔ −a
            up, down = (quad.kernel(beta, *quad.integrate(modes[col], theta0, e, steps=6)).mean().item()
                        for e in (eps, -eps))
            x[eps] = (up + down - 2 * lam0) / (2 * eps**2) / lam0
        richardson = (4 * x[0.05] - x[0.1]) / 3
        assert so.S[row, col] == pytest.approx(richardson, rel=2e-3, abs=1e-6)
        assert abs(so.S[row, col] - richardson) < 0.05 * so.S_stderr[row, col] + 1e-6


def test_linear_activation_has_the_exact_second_order_constants():
    # linear σ: λ_{z_i} = g_i(⟨ŵ_i²⟩/g_i + ⟨a²⟩); driven by z_j, ⟨a²⟩ and ⟨ŵ_j²⟩/g_j grow as cosh(2γ sqrt(g_j) D)
    so = second_order_constants(["z0", "z1"], G3, "u", 0.5, n_neurons=2000)
    np.testing.assert_allclose(so.S, [[2 * G3[0], G3[1]], [G3[0], 2 * G3[1]]], rtol=0.1)
    np.testing.assert_allclose(np.diag(so.S), 2 * G3[:2], rtol=1e-6)   # exact per neuron up to rounding


def _linear_theory(expr: str = "z0"):
    theory = make_theory(expr, 3)
    return dataclasses.replace(theory, g=G3, activation="u", bias_std=0.5)


def test_resummed_law_is_the_exact_flow_of_a_linear_network():
    theory = _linear_theory("z0")
    inputs, system = system_inputs(theory, Variant("resummed"))
    compiled = compile_system(system)
    gamma = theory.gamma
    for D in (0.5, 2.0, 5.0):
        _, _, lam = compiled.observe(np.array([0.0, D]), *inputs)
        rho = lam[0] / inputs[system.inputs.index("lam0")][0]
        assert rho == pytest.approx(math.cosh(2 * gamma * math.sqrt(G3[0]) * D), rel=1e-6)  # S from differences


def test_a_term_with_named_sub_expressions_compiles_its_body_and_prints_them():
    """resummed's body is its compact law with ξ_α, ζ_α, ω_α put in (no name left for the compiler); the printed
    system shows the compact law and each definition on its own row; a compact form that is not the body, or
    definitions in a cycle, are refused."""
    term = ode.RESUMMED_GROWTH
    assert {x.base for x in term.body.atoms(sp.Indexed)} <= {ode.D, ode.Ud, ode.V, ode.Sd}
    assert term.compact.has(ode.xi) and term.compact.has(ode.zeta)
    tex = system_latex(Variant("resummed").system())
    assert r"\xi_{\alpha} &= " in tex and r"\zeta_{\alpha} &= " in tex and r"\omega_{\alpha}^{2} &= " in tex
    assert r"\sinh" not in tex.split(r"\xi_{\alpha} &= ")[0]  # the growth itself in ξ, ζ
    with pytest.raises(ode.AssemblyError, match="defined_term"):
        ode.Term("bad", ode.D[ode.alpha], (), sp.Integer(1), "", ode.xi[ode.alpha],
                 (ode.Definition(ode.xi, ode.alpha, 2 * ode.D[ode.alpha]),))
    cycle = (ode.Definition(ode.xi, ode.alpha, ode.zeta[ode.alpha]),
             ode.Definition(ode.zeta, ode.alpha, ode.xi[ode.alpha]))
    with pytest.raises(ode.AssemblyError, match="cycle"):
        ode.defined_term("bad", ode.xi[ode.alpha], cycle, (), sp.Integer(1), "")


def test_eigenvalue_laws_replace_eigen_growth_and_keep_r_at_one():
    for name in ("second_order", "resummed"):
        assert name in closure_names()
        v = Variant(name)
        assert "eigen_growth" not in v.term_names() and f"{name}_growth" in v.term_names()
        system = v.system()
        assert system.assignment("r").expr == 1
        assert system.assignment("rho").expr.has(ode.Ud) and system.assignment("rho").expr.has(ode.V)
        assert tex_text(f"{name}_growth") in system_latex(system)
        assert expr_latex(ode.SECOND_ORDER_GROWTH.body) in system_latex(Variant("second_order").system())


def test_second_order_closure_solves_and_uses_q():
    theory = dataclasses.replace(make_theory("staircase(2)", 8), activation="relu", bias_std=0.5)
    inputs, system = system_inputs(theory, Variant("second_order"))
    assert inputs[system.inputs.index("q")] == pytest.approx(theory.gamma**2)
    S = inputs[system.inputs.index("S")]
    assert S.shape == (2, 2) and np.all(np.diag(S) > 0)
    lazy = solve_variant(theory, "lazy", 300.0)
    so = solve_variant(theory, "second_order", 300.0)
    assert so.t10 < lazy.t10                   # features grow, so it learns faster than the kernel regime
    np.testing.assert_allclose(so.r, 1.0)


def test_second_order_closure_needs_the_activation():
    from featureode.ode.solve import SolveError
    with pytest.raises(SolveError, match="need the network's activation"):
        system_inputs(make_theory("z0", 4), Variant("second_order"))


def test_parts_of_the_second_order_growth_sum_to_it_and_follow_the_closure():
    from featureode.kernel.second_order_mc import predicted_parts
    from featureode.kernel.second_order import second_order_constants as exact_constants
    theory = dataclasses.replace(make_theory("staircase(2)", 8), activation="relu", bias_std=0.5)
    so = second_order_constants(theory.modes, theory.g, "relu", 0.5, drivers=[0, 1], n_neurons=4000)
    np.testing.assert_allclose(sum(so.S_parts.values()), so.S, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sum(so.lambda0_parts.values()), so.lambda0, rtol=1e-12)
    # linear network: the readout part ŵ_0² and the weights part a² g_0 of λ_z0 each grow by cosh(2γ sqrt(g_0) D)
    lin = second_order_constants(["z0"], G3, "u", 0.5, n_neurons=2000)
    np.testing.assert_allclose(lin.lambda0_parts["bias"], 0.0, atol=1e-15)
    D = np.array([[0.0], [1.0], [3.0]])
    parts = predicted_parts(lin, D, q=0.25, resummed=True)
    exact = np.cosh(2 * 0.5 * math.sqrt(G3[0]) * D[:, 0])
    np.testing.assert_allclose(parts["readout"][:, 0] + parts["weights"][:, 0], lin.lambda0[0] * exact, rtol=1e-6)
    # the solved ρ_β is the positive law (1 + q/2 Σ V D²)² + q Σ_α U_ββαα D_α² with the deterministic constants
    # (cross terms of two drivers dropped: here z0 and z0*z1 differ in parity, so they vanish anyway)
    sol = solve_variant(theory, "second_order", 100.0)
    ex = exact_constants(theory.modes, theory.g, "relu", 0.5, drivers=[0, 1])
    D, q = sol.get("D"), theory.gamma**2
    rho = (1 + q / 2 * (D**2) @ ex.V.T) ** 2 + q * (D**2) @ np.einsum("baa->ba", ex.U).T
    np.testing.assert_allclose(sol.lam / sol.lam[0], rho, rtol=1e-8)


@pytest.mark.parametrize("kappa", [-1.0, float("nan"), float("inf"), "x", True])
def test_a_bad_kappa_is_refused_where_the_variant_is_made(kappa):
    """The AGOP constant as the config's [ode] kappa rule has it (finite, ≥ 0): a negative or NaN κ was accepted
    silently by the Python API (ignored by every closure but agop, which reads it)."""
    with pytest.raises(VariantError, match="kappa = .* must be a finite number ≥ 0"):
        Variant("agop", kappa=kappa)
    assert Variant("agop", kappa=0.5).kappa == 0.5 and Variant("agop", kappa=2).kappa == 2.0
