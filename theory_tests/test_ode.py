"""Feature ODE, symbolic layer: indexed vs expanded renderings, exact Jacobian, ablation, variants, bad input."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from _ode_theories import extended_theory, make_theory
from featureode.ode import terms as ode
from featureode.ode.compile import compile_system, generate_source
from featureode.config import ODEConfig
from featureode.calculus.hermite import Mode
from featureode.export.latex import system_latex
from featureode.ode.solve import solve_variant, system_inputs
from featureode.ode.variants import (Variant, VariantError, make_closure, parse_expression, term_names,
                                 variants_from_config)

VARIANTS = [Variant("lazy"), Variant("agop"), Variant("agop", kappa=0.3, scale=True), Variant("displacement"),
            Variant("displacement", scale=True)]
CASES = [(v, b) for v in VARIANTS for b in ("target", "extended")]


def _ids(case: tuple) -> str:
    return f"{case[0].label}-{case[1]}"


def _theory(basis: str):
    return extended_theory("staircase(2)", 6) if basis == "extended" else make_theory("staircase(3)", 6)


def _state(m: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(0.3, 0.4, m), rng.normal(0.0, 2.0, m)])


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_indexed_and_expanded_renderings_agree(case):
    variant, basis = case
    theory = _theory(basis)
    inputs, system = system_inputs(theory, variant, "exact", basis)
    expanded = system.expanded(theory.modes, theory.g.size, dict(zip(system.inputs, inputs)))
    compiled = compile_system(system)
    rhs = sp.lambdify(expanded.states, list(expanded.rhs))
    jac = sp.lambdify(expanded.states, expanded.jacobian())
    observe = {k: sp.lambdify(expanded.states, list(exprs)) for k, exprs in expanded.observables.items()}
    for seed in (1, 2):
        y = _state(len(theory.modes), seed)
        np.testing.assert_allclose(compiled.rhs(y, *inputs), rhs(*y), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(compiled.jac(y, *inputs), jac(*y), rtol=1e-10, atol=1e-12)
        r, s, lam = compiled.observe(y, *inputs)
        obs = {k: fn(*y) for k, fn in observe.items()}
        np.testing.assert_allclose(r, obs["r"], rtol=1e-12)
        np.testing.assert_allclose([s], obs["s"], rtol=1e-12)
        np.testing.assert_allclose(lam, obs["lam"], rtol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_exact_jacobian_matches_finite_differences(case):
    variant, basis = case
    theory = _theory(basis)
    inputs, system = system_inputs(theory, variant, "exact", basis)
    compiled = compile_system(system)
    y = _state(len(theory.modes), 3)
    fd = np.empty((y.size, y.size))
    for k in range(y.size):
        h = 1e-6 * max(1.0, abs(y[k]))
        e = np.zeros_like(y)
        e[k] = h
        fd[:, k] = (compiled.rhs(y + e, *inputs) - compiled.rhs(y - e, *inputs)) / (2 * h)
    jac = compiled.jac(y, *inputs)
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7 * np.abs(jac).max())


def test_expanded_rendering_is_readable_for_one_mode():
    """``h2(z0)`` under AGOP: ``r_0 = 1 + 2κ f²/g_0`` and ``df/dt = λ(0) r_0² (v − f)``."""
    expanded = Variant("agop").system().expanded([Mode.parse("h2(z0)")], 2)
    f0, d0 = expanded.states
    lam0, v, g0 = sp.Symbol("lam0[h2(z0)]"), sp.Symbol("v[h2(z0)]"), sp.Symbol("g_0")
    expected = lam0 * (1 + 2 * ode.kappa * f0**2 / g0) ** 2 * (v - f0)
    assert sp.simplify(expanded.rhs[0] - expected) == 0
    assert expanded.rhs[1] == v - f0
    assert expanded.observables["r"] == (1 + 2 * ode.kappa * f0**2 / g0, sp.Integer(1))


def _all_terms(system: ode.System) -> list[str]:
    return [t.name for t in system.terms]


@pytest.mark.parametrize("term", ["displacement_growth", "scale", "eigen_growth", "kernel_flow", "mode_coupling",
                                  "residual_integral"])
def test_ablating_a_term_removes_exactly_that_term(term):
    full = Variant("displacement", scale=True).system("extended")
    cut = Variant("displacement", scale=True, ablate=[term]).system("extended")
    removed = full.term(term)
    assert term in _all_terms(full) and term not in _all_terms(cut) and cut.removed == (term,)
    assert cut.key != full.key
    for a, b in zip(full.assignments, cut.assignments):
        assert a.template == b.template
        fill = {t.placeholder: (t.neutral if t.name == term else t.body) for t in full.terms}
        expected = a.template.xreplace(fill)
        assert b.expr == expected
        assert (b.expr == a.expr) == (not a.template.has(removed.placeholder))
    # numerically: the compiled code matches a hand-written reference with exactly that term switched off
    theory = extended_theory("staircase(2)", 6)
    y = _state(len(theory.modes), 4)
    for variant, off in ((Variant("displacement", scale=True), set()),
                         (Variant("displacement", scale=True, ablate=[term]), {term})):
        inputs, system = system_inputs(theory, variant, "exact", "extended")
        expected = _reference_rhs(theory, y, "displacement", scale=True, off=off)
        np.testing.assert_allclose(compile_system(system).rhs(y, *inputs), expected, rtol=1e-12, atol=1e-14)
    assert not np.allclose(_reference_rhs(theory, y, "displacement", True, set()),
                           _reference_rhs(theory, y, "displacement", True, {term}))


def _reference_rhs(theory, y: np.ndarray, closure: str, scale: bool, off: set, kappa: float = 0.3) -> np.ndarray:
    """theory §4 written out by hand in NumPy (independent of the SymPy layer); ``off``: terms switched off."""
    modes, g, gamma = theory.modes, theory.g, theory.gamma
    m = len(modes)
    f, dd = y[:m], y[m:]
    orders = np.array([mo.dense(g.size) for mo in modes], dtype=float)
    gpow = np.array([mo.g_power(g) for mo in modes])
    c = theory.c[[mo.degree for mo in modes]]
    v, lam0 = theory.target, theory.lambda_exact
    r = np.ones(g.size)
    if closure == "displacement" and "displacement_growth" not in off:
        r = 1 + gamma**2 * orders.T @ (c * gpow * dd**2)
    if closure == "agop" and "agop_growth" not in off:
        r = 1 + kappa * orders.T @ f**2 / g
    s = 1 + gamma**2 * np.sum(c * gpow * dd**2) if scale and "scale" not in off else 1.0
    rho = s * (np.prod(r[None, :] ** orders, axis=1) if "eigen_growth" not in off else 1.0)
    dfdt = lam0 * rho * (v - f) if "kernel_flow" not in off else np.zeros(m)
    if theory.gram is not None and "mode_coupling" not in off:
        k_off = theory.gram - np.diag(np.diag(theory.gram))
        dfdt = dfdt + np.sqrt(rho) * (k_off @ (np.sqrt(rho) * (v - f)))
    ddt = v - f if "residual_integral" not in off else np.zeros(m)
    return np.concatenate([dfdt, ddt])


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_compiled_rhs_matches_hand_written_reference(case):
    variant, basis = case
    theory = _theory(basis)
    inputs, system = system_inputs(theory, variant, "exact", basis)
    y = _state(len(theory.modes), 5)
    kappa = theory.kappa if variant.kappa is None else variant.kappa
    expected = _reference_rhs(theory, y, variant.closure_obj.name, variant.scale, set(), kappa)
    np.testing.assert_allclose(compile_system(system).rhs(y, *inputs), expected, rtol=1e-12, atol=1e-14)


def test_ablating_eigen_growth_is_consistent_across_code_solution_and_latex():
    theory = make_theory("staircase(2)")
    cut = Variant("displacement", ablate=["eigen_growth"])
    system = cut.system()
    assert system.assignment("rho").expr == ode.s
    assert "numpy.prod" not in generate_source(system) and "numpy.prod" in generate_source(
        Variant("displacement").system())
    tex = system_latex(system)
    assert r"removed: \texttt{eigen\_growth}" in tex and r"\prod" not in tex
    lazy, ablated, full = (solve_variant(theory, v, 200.0) for v in (Variant("lazy"), cut, Variant("displacement")))
    np.testing.assert_allclose(ablated.f, lazy.f, rtol=1e-6, atol=1e-9)
    assert np.all(ablated.r[-1, :2] > 1.0) and np.all(lazy.r == 1.0)
    assert full.t10 < 0.8 * lazy.t10


def test_replaced_eigenvalue_law():
    theory = make_theory("staircase(2)")
    variant = Variant("displacement", replace={"eigen_growth": "prod_i(r[i]**(2*B[b,i]))"})
    assert variant.label == "displacement-eigen_growth-replaced"
    inputs, system = system_inputs(theory, variant)
    r, s, lam = compile_system(system).observe(_state(2), *inputs)
    orders = inputs[0]
    np.testing.assert_allclose(lam, inputs[2] * np.prod(r[None, :] ** (2 * orders), axis=1), rtol=1e-12)


def test_custom_closure_from_expression():
    closure = make_closure("expdisp", "exp(eta*gamma**2*sum_b(B[b,i]*c[b]*gpow[b]*D[b]**2))", params={"eta": 2.0})
    assert closure.term.name == "expdisp_growth" and closure.params == {"eta": 2.0}
    theory = make_theory("z0*z1")
    inputs, system = system_inputs(theory, Variant(closure))
    assert system.inputs[-1] == "eta" and inputs[-1] == 2.0
    y = _state(1)
    r, _, _ = compile_system(system).observe(y, *inputs)
    c1 = theory.c[2] * theory.modes[0].g_power(theory.g)
    np.testing.assert_allclose(r[:2], np.exp(2.0 * 0.25 * c1 * y[1] ** 2), rtol=1e-12)
    np.testing.assert_allclose(r[2:], 1.0)


# ------------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------------
def test_unknown_closure_lists_valid_ones():
    with pytest.raises(VariantError, match="unknown closure 'agopp'.*lazy, agop, displacement"):
        Variant("agopp")


def test_unknown_term_lists_valid_ones():
    with pytest.raises(VariantError, match="unknown term 'eigengrowth'.*eigen_growth"):
        Variant("agop", ablate=["eigengrowth"])
    with pytest.raises(VariantError, match="unknown term 'flow'.*kernel_flow"):
        Variant("agop", replace={"flow": "0"})


def test_term_absent_from_variant_is_an_error():
    with pytest.raises(VariantError, match="no term 'mode_coupling'.*its terms: agop_growth"):
        Variant("agop", ablate=["mode_coupling"]).system("target")
    with pytest.raises(VariantError, match="no term 'scale'"):
        Variant("lazy", ablate=["scale"]).system()


def test_undefined_symbols_are_named():
    with pytest.raises(VariantError, match="undefined symbols: eta, foo"):
        parse_expression("1 + eta*sum_b(B[b,i]*foo[b])")
    with pytest.raises(VariantError, match=r"undefined symbols: zeta, bar\(…\)"):
        parse_expression(sp.Symbol("zeta") * ode.f[ode.beta] + sp.Function("bar")(ode.i))
    with pytest.raises(VariantError, match="undefined symbols: qq"):
        make_closure("mine", "1 + qq*sum_b(D[b]**2)")
    with pytest.raises(VariantError, match="f must be written with indices"):
        parse_expression("1 + f")


def test_closure_with_stray_index_is_an_error():
    with pytest.raises(VariantError, match=r"direction index i only.*\['beta'\]"):
        make_closure("bad", "1 + D[b]**2")
    with pytest.raises(VariantError, match="free indices"):
        Variant("lazy", replace={"eigen_growth": "r[i]"}).system()


def test_term_using_a_later_intermediate_is_an_error():
    with pytest.raises(VariantError, match="uses lam"):
        Variant(make_closure("circular", "1 + sum_b(lam[b])")).system()


def test_config_variants_custom_tables_and_global_ablation():
    cfg = ODEConfig(variants=["lazy", "agop", "mine"], ablate=["eigen_growth"], kappa=0.2,
                    custom={"mine": {"closure": "1 + eta*sum_b(B[b,i]*D[b]**2)", "params": {"eta": 0.5},
                                     "scale": True}})
    lazy, agop, mine = variants_from_config(cfg)
    assert [v.label for v in (lazy, agop, mine)] == ["lazy-no-eigen_growth", "agop-no-eigen_growth",
                                                     "mine-no-eigen_growth"]
    assert agop.kappa == 0.2 and mine.scale and mine.param_values == {"eta": 0.5}
    assert "mine_growth" in mine.term_names() and mine.ablate == ("eigen_growth",)


@pytest.mark.parametrize("cfg, message", [
    (ODEConfig(variants=["lazy", "nope"]), "unknown variant 'nope'; valid: built-in closures lazy, agop"),
    (ODEConfig(variants=["lazy"], custom={"x": {"closure": "agop"}}), "tables x are not listed"),
    (ODEConfig(variants=["x"], custom={"x": {"closure": "agop", "kapa": 1}}), "unknown key.*kapa.*kappa"),
    (ODEConfig(variants=["x"], custom={"x": {"closure": "agopp"}}), "unknown closure 'agopp'"),
    (ODEConfig(variants=["lazy"], ablate=["agop_growth"]), "no listed variant has term 'agop_growth'"),
    (ODEConfig(variants=["lazy"], ablate=["growth"]), "unknown term 'growth'"),
])
def test_bad_config_tables(cfg, message):
    with pytest.raises(VariantError, match=message):
        variants_from_config(cfg)


def test_term_names_are_listed():
    assert {"kernel_flow", "residual_integral", "eigen_growth", "scale", "mode_coupling", "agop_growth",
            "displacement_growth"} <= set(term_names())


def test_closure_prefactor_is_the_parametrizations_and_reproduces_gamma_squared():
    from featureode.kernel.parametrization import ParametrizationError
    theory = make_theory("staircase(2)", 6, gamma=0.37)
    inputs, system = system_inputs(theory, Variant("displacement"))
    assert inputs[system.inputs.index("q")] == 0.37**2
    compiled = compile_system(system)
    y = _state(len(theory.modes))
    r, _, _ = compiled.observe(y, *inputs)
    D = y[len(theory.modes):]
    Bm = np.array([m.dense(6) for m in theory.modes], float)
    gpow = np.array([m.g_power(theory.g) for m in theory.modes])
    c = theory.c[[m.degree for m in theory.modes]]
    np.testing.assert_allclose(r, 1 + 0.37**2 * (Bm * (c * gpow * D**2)[:, None]).sum(0), rtol=1e-13)
    agop_inputs, agop = system_inputs(theory, Variant("agop"))
    assert agop_inputs[agop.inputs.index("kappa")] == pytest.approx(theory.kappa, rel=1e-12)   # γ² c_1/Λ_1²
    with pytest.raises(ParametrizationError, match="unknown parametrization 'ntk'.*valid parametrizations: meanfield"):
        system_inputs(theory, Variant("displacement"), parametrization="ntk")


def test_replay_is_not_an_ode_variant():
    with pytest.raises(VariantError, match="'replay' drives the kernel flow with the measured"):
        variants_from_config(ODEConfig(variants=["lazy", "replay"]))
    assert [v.label for v in variants_from_config(ODEConfig(variants=["lazy", "replay"]), allow_replay=True)] \
        == ["lazy"]
