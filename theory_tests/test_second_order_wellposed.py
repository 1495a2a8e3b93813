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
from featureode.ode.solve import SolveError, solve_variant, system_inputs
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


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_compiled_laws_are_nonnegative_for_any_residuals(seed):
    rng = np.random.default_rng(seed)
    M = 3
    for name in ("second_order", "resummed", "rational"):
        system = Variant(name).system()
        comp = compile_system(system)
        # a random Gram matrix U_β (PSD) and V of any sign, as the quadrature gives them
        A = rng.standard_normal((M, M, M))
        U = np.einsum("bak,bck->bac", A, A) / M
        V = 3 * rng.standard_normal((M, M))
        S = np.einsum("baa->ba", U) + V
        inputs = {"B": np.eye(M), "v": np.ones(M), "lam0": np.ones(M), "g": np.ones(M), "gpow": np.ones(M),
                  "c": np.ones(M), "K": np.zeros((0, 0)), "S": S, "Sd": np.maximum(np.diag(S), 1e-30), "U": U,
                  "V": V, "sv": np.zeros(0), "gamma": 0.5, "kappa": 0.1, "q": 0.25, "q_a": 0.25, "q_w": 0.25}
        for scale in (0.1, 1.0, 10.0, 30.0):
            y = np.concatenate([np.zeros(M), scale * rng.standard_normal(M)])
            lam = comp.observe(y, *[inputs[k] for k in system.inputs])[2]
            assert np.all(lam >= -1e-12 * np.maximum(1, np.abs(lam)).max()), (name, scale, lam)


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
            "U": np.zeros((M, M, M)), "V": np.zeros((M, M)), "sv": np.zeros(0), "gamma": 0.5, "kappa": 0.1,
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
