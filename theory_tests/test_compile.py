"""Feature ODE code generation: NumPy vs numba, the on-disk cache, mode-count independence."""
from __future__ import annotations

import numpy as np
import pytest

from _ode_theories import extended_theory, make_theory
from featureode.ode import compile as fcompile
from featureode.ode.compile import CompileError, compile_system
from featureode.ode.solve import solve_variant, system_inputs
from featureode.ode.variants import Variant

pytest.importorskip("numba")


def _state(m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(0.3, 0.4, m), rng.normal(0.0, 2.0, m)])


def _agree(variant: Variant, theory, basis: str) -> None:
    inputs, system = system_inputs(theory, variant, "exact", basis)
    fast, jit = compile_system(system, "numpy"), compile_system(system, "numba")
    for seed in range(3):
        y = _state(len(theory.modes), seed)
        np.testing.assert_allclose(jit.rhs(y, *inputs), fast.rhs(y, *inputs), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(jit.jac(y, *inputs), fast.jac(y, *inputs), rtol=1e-10, atol=1e-12)
        for a, b in zip(jit.observe(y, *inputs), fast.observe(y, *inputs)):
            np.testing.assert_allclose(a, b, rtol=1e-10)


def test_numpy_and_numba_agree_small():
    """One small system covering sums, products, deltas and the extended basis (numba compiles once, cached)."""
    _agree(Variant("agop", kappa=0.3, scale=True), extended_theory("z0*z1", 4), "extended")


@pytest.mark.slow
@pytest.mark.parametrize("closure", ["lazy", "agop", "displacement"])
@pytest.mark.parametrize("basis", ["target", "extended"])
def test_numpy_and_numba_agree_all(closure, basis):
    theory = extended_theory("staircase(2)", 6) if basis == "extended" else make_theory("staircase(3)", 8)
    _agree(Variant(closure, scale=closure == "displacement"), theory, basis)


@pytest.mark.slow
def test_numba_solution_matches_numpy():
    theory = make_theory("staircase(3)")
    # the backend chooses the right-hand side code of the solve_ivp methods (rodas4 always runs the numba code)
    a, b = (solve_variant(theory, "displacement", 1e3, backend=backend, method="LSODA")
            for backend in ("numpy", "numba"))
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-6, atol=1e-9)


def test_second_compile_reads_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fcompile, "_LOADED", {})
    system = Variant("displacement", scale=True).system()
    first = compile_system(system)
    assert not first.from_cache and first.path.parent == tmp_path and first.path.exists()
    stamp = first.path.stat().st_mtime_ns
    monkeypatch.setattr(fcompile, "_LOADED", {})
    monkeypatch.setattr(fcompile, "generate_source", lambda *a, **k: pytest.fail("regenerated a cached system"))
    second = compile_system(system)
    assert second.from_cache and second.path == first.path and first.path.stat().st_mtime_ns == stamp
    y = _state(2)
    inputs, _ = system_inputs(make_theory("staircase(2)"), Variant("displacement", scale=True))
    np.testing.assert_array_equal(first.rhs(y, *inputs), second.rhs(y, *inputs))
    assert Variant("displacement").system().key != system.key


def test_code_does_not_depend_on_the_mode_set():
    """Same equations on 2 and on 9 modes: one system key, one compiled module, both sizes evaluated."""
    small, large = make_theory("staircase(2)", 8), make_theory("staircase(3)", 12)
    (in_s, sys_s), (in_l, sys_l) = (system_inputs(t, Variant("agop")) for t in (small, large))
    assert sys_s.key == sys_l.key
    compiled = compile_system(sys_s)
    assert compiled.rhs(_state(2), *in_s).shape == (4,) and compiled.rhs(_state(3), *in_l).shape == (6,)
    assert compiled.jac(_state(3), *in_l).shape == (6, 6)


def test_unknown_backend_is_named():
    with pytest.raises(CompileError, match="unknown backend 'cuda'.*valid backends: numpy, numba"):
        compile_system(Variant("lazy").system(), "cuda")


MIN_COUPLING = "sum_a(K[b,a]*Min(rho[a],rho[b])*(v[a]-f[a]))"


def test_min_in_a_replaced_term_compiles_in_both_backends():
    """A user term with Min (printed through functools.reduce): NumPy and numba agree, the Jacobian matches central
    differences, and under the lazy closure (ρ = 1, so Min(ρ_α, ρ_β) = 1 = sqrt(ρ_α ρ_β)) it equals the built-in
    coupling."""
    theory = extended_theory("z0*z1", 4)
    variant = Variant("displacement", replace={"mode_coupling": MIN_COUPLING})
    _agree(variant, theory, "extended")
    inputs, system = system_inputs(theory, variant, "exact", "extended")
    compiled = compile_system(system, "numpy")
    y = _state(len(theory.modes), 5)
    fd = np.empty((y.size, y.size))
    for k in range(y.size):
        e = np.zeros_like(y)
        e[k] = 1e-6 * max(1.0, abs(y[k]))
        fd[:, k] = (compiled.rhs(y + e, *inputs) - compiled.rhs(y - e, *inputs)) / (2 * e[k])
    jac = compiled.jac(y, *inputs)
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7 * np.abs(jac).max())
    ins_min, sys_min = system_inputs(theory, Variant("lazy", replace={"mode_coupling": MIN_COUPLING}), "exact",
                                     "extended")
    ins_ref, sys_ref = system_inputs(theory, Variant("lazy"), "exact", "extended")
    np.testing.assert_allclose(compile_system(sys_min).rhs(y, *ins_min), compile_system(sys_ref).rhs(y, *ins_ref),
                               rtol=1e-13, atol=1e-15)


def test_unprintable_term_is_a_clear_error():
    bad = Variant("displacement", replace={"mode_coupling": "sum_a(K[b,a]*Abs(rho[a]-rho[b])*(v[a]-f[a]))"})
    with pytest.raises(CompileError, match="Abs or sign.*Min, Max"):
        compile_system(bad.system(basis="extended"), "numpy")
