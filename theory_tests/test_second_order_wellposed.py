"""Well-posedness of the positive second-order laws: over random configs (activation, target degree 1–4, d, γ,
basis) the solved ``second_order``, ``resummed`` and ``rational`` flows stay finite with every ``ρ_β > 0`` (no blow-up), and the
compiled law is ``≥ 0`` for arbitrary (also huge) integrated residuals ``D``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featureode.config import load_config
from featureode.kernel.theory import kernel_theory
from featureode.ode.compile import compile_system
from featureode.ode.solve import SolveError, solve_variant
from featureode.ode.variants import Variant

TARGETS = {1: ["z0", "z1", "0.8*z0 + 0.6*z2"], 2: ["z0*z1", "h2(z0)", "staircase(2)"],
           3: ["h3(z0)", "h2(z0)*z1", "z0*z1*z2"], 4: ["h4(z0)", "h2(z0)*h2(z1)", "h3(z0)*z1"]}


@st.composite
def configs(draw):
    degree = draw(st.integers(1, 4))
    cfg = load_config(None).replace(
        data={"dim": draw(st.sampled_from([8, 16, 32]))},
        target={"expr": draw(st.sampled_from(TARGETS[degree]))},
        network={"activation": draw(st.sampled_from(["relu", "erf", "tanh", "gelu"])),
                 "richness": draw(st.floats(0.005, 1.0))},
        ode={"basis": draw(st.sampled_from(["target", "extended"])), "extended_max_modes": 6})
    return cfg


@settings(max_examples=4, deadline=None)
@given(configs())
def test_positive_laws_stay_finite_and_positive_along_the_solution(cfg):
    from featureode.calculus.activations import ActivationError

    basis = cfg.ode.basis
    try:
        kt = kernel_theory(cfg, basis=basis, with_gram=basis == "extended")
    except ActivationError as exc:
        # a kernel entry whose average does not exist (e.g. relu's m_6 on a degree-4 extended basis) is refused
        # with its reason: a reported result, never a blow-up
        assert "diverges" in str(exc), str(exc)
        return
    for name in ("second_order", "resummed", "rational"):
        try:
            traj = solve_variant(kt, name, cfg.training.t_max, basis=basis)
        except (SolveError, ActivationError) as exc:
            # a constant that does not exist (diverging average) is reported, never a blow-up
            assert "second-order constants" in str(exc) or "diverges" in str(exc), str(exc)
            return
        assert traj.status.error is None
        rho = traj.lam / traj.lam[0]
        assert np.all(np.isfinite(rho)) and np.all(rho[:, kt.lambda_exact > 0] > 0)
        assert np.all(np.isfinite(traj.f))


def _law_inputs(rng: np.random.Generator, M: int) -> dict:
    """Random constants as the quadrature gives them: ``U_β`` a Gram matrix (PSD), ``V`` of any sign, and what
    :func:`featureode.ode.solve.system_inputs` derives from them (``U`` without its cross terms, its diagonal ``Ud``)."""
    A = rng.standard_normal((M, M, M))
    U = np.einsum("bak,bck->bac", A, A) / M
    V = 3 * rng.standard_normal((M, M))
    S = np.einsum("baa->ba", U) + V
    Ud = np.einsum("baa->ba", U)
    Uo = np.zeros_like(U)
    Uo[:, np.arange(M), np.arange(M)] = Ud
    return {"B": np.eye(M), "v": np.ones(M), "lam0": np.ones(M), "g": np.ones(M), "gpow": np.ones(M),
            "c": np.ones(M), "K": np.zeros((0, 0)), "S": S, "Sd": np.maximum(np.diag(S), 1e-30), "U": Uo,
            "V": V, "Ud": Ud, "sv": np.zeros(0), "gamma": 0.5, "kappa": 0.1, "q": 0.25, "q_a": 0.25, "q_w": 0.25}


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_compiled_laws_are_nonnegative_for_any_residuals(seed):
    rng = np.random.default_rng(seed)
    M = 3
    inputs = _law_inputs(rng, M)
    for name in ("second_order", "resummed", "rational"):
        system = Variant(name).system()
        comp = compile_system(system)
        for scale in (0.1, 1.0, 10.0, 30.0):
            y = np.concatenate([np.zeros(M), scale * rng.standard_normal(M)])
            lam = comp.observe(y, *[inputs[k] for k in system.inputs])[2]
            assert np.all(lam >= -1e-12 * np.maximum(1, np.abs(lam)).max()), (name, scale, lam)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_compiled_positive_laws_are_their_formulas(backend):
    """The compiled ``second_order`` and ``resummed`` laws against the formulas written out here in NumPy:
    ``ρ_β = (1 + Σ_α V_{βα} c_α)² + Σ_α U_{βαα} s_α²`` with ``s = √q D``, ``c = qD²/2`` (second order) and
    ``s = sinh(ω√qD)/ω``, ``c = 2 sinh²(ω√qD/2)/ω²``, ``ω_α = sqrt(Sd_α/2)`` (resummed); and, with the full ``U_β``
    of the derivation restricted to its diagonal, equal to ``(1 + V c)² + sᵀU_β s`` (the cross terms dropped)."""
    rng = np.random.default_rng(11)
    M = 4
    inputs = _law_inputs(rng, M)
    q, V, Ud, Sd = inputs["q"], inputs["V"], inputs["Ud"], inputs["Sd"]
    om = np.sqrt(Sd / 2)
    for scale in (1e-3, 0.5, 4.0):
        D = scale * rng.standard_normal(M)
        x = np.sqrt(q) * D
        laws = {"second_order": (x, q * D**2 / 2),
                "resummed": (np.sinh(om * x) / om, 2 * np.sinh(om * x / 2) ** 2 / om**2)}
        for name, (s_a, c_a) in laws.items():
            system = Variant(name).system()
            comp = compile_system(system, backend)
            lam = comp.observe(np.concatenate([np.zeros(M), D]), *[inputs[k] for k in system.inputs])[2]
            want = (1 + V @ c_a) ** 2 + Ud @ s_a**2
            np.testing.assert_allclose(lam, want, rtol=1e-12)
            np.testing.assert_allclose(lam, (1 + V @ c_a) ** 2 + np.einsum("a,bad,d->b", s_a, inputs["U"], s_a),
                                       rtol=1e-12)


def test_rational_law_is_the_truncated_growth_continued_without_sign_change():
    """The compiled ``rational`` law against its formula written here: ``ρ_β = (1 + qΣS⁺D²)/(1 + qΣS⁻D²)``; equal
    to the truncated ``1 + qΣ_α S_{βα} D_α²`` wherever every ``S_{βα} ≥ 0``, to it to ``O(D²)`` otherwise, and in
    ``(0, ∞)`` for any ``D``."""
    rng = np.random.default_rng(3)
    M, q = 4, 0.3
    system = Variant("rational").system()
    comp = compile_system(system)
    S = rng.standard_normal((M, M))
    S[0] = np.abs(S[0])                       # one mode with only growing parts
    base = {"B": np.eye(M), "v": np.ones(M), "lam0": np.ones(M), "g": np.ones(M), "gpow": np.ones(M),
            "c": np.ones(M), "K": np.zeros((0, 0)), "S": S, "Sd": np.maximum(np.diag(S), 1e-30),
            "U": np.zeros((M, M, M)), "V": np.zeros((M, M)), "Ud": np.zeros((M, M)), "sv": np.zeros(0), "gamma": 0.5,
            "kappa": 0.1,
            "q": q, "q_a": q, "q_w": q}
    for scale in (1e-4, 0.3, 3.0, 300.0):
        D = scale * rng.standard_normal(M)
        lam = comp.observe(np.concatenate([np.zeros(M), D]), *[base[k] for k in system.inputs])[2]
        want = (1 + q * np.maximum(S, 0) @ D**2) / (1 + q * np.maximum(-S, 0) @ D**2)
        np.testing.assert_allclose(lam, want, rtol=1e-12)
        assert np.all(lam > 0) and np.all(np.isfinite(lam))
        assert lam[0] == pytest.approx(1 + q * S[0] @ D**2, rel=1e-12)
        if scale < 1e-3:   # O(D²) agreement with the truncated law: the difference is O(D⁴)
            np.testing.assert_allclose(lam - 1, q * S @ D**2, rtol=1e-5, atol=1e-15)
