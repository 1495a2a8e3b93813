"""The one Registry behind activations, closures, parametrizations, code-generation backends and executors: its name
rules, the closest-name message, registration after import (read by the config check), and one registered object
of each kind doing its job."""
from __future__ import annotations

import concurrent.futures as cf
import math
from dataclasses import dataclass

import numpy as np
import pytest

from featureode.calculus import activations
from featureode.calculus.activations import ActivationError, from_expression, get_activation, register_activation
from featureode.config import ConfigError, config_from_dict, load_config
from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry, RegistryError
from featureode.kernel.parametrization import (PARAMETRIZATIONS, MeanField, ParametrizationError,
                                               get_parametrization, register_parametrization)
from featureode.ode import compile as fcompile
from featureode.ode.compile import BACKENDS, Backend, CompileError, NumPyBackend, compile_system, register_backend
from featureode.ode.variants import CLOSURES, VariantError, get_closure
from featureode.workflow import executors


# ----------------------------------------------------------------------------------------------------------------
# the registry itself
# ----------------------------------------------------------------------------------------------------------------
def test_names_lookup_and_the_case_rule():
    reg: Registry[int] = Registry("thing")
    reg.register("alpha", 1)
    reg.register("Beta", 2)
    assert reg.names() == ["alpha", "Beta"] and len(reg) == 2 and list(reg) == ["alpha", "Beta"]
    assert reg.get("alpha") == 1 and reg["Beta"] == 2
    # exact first; else the unique case-folded match, surrounding spaces ignored
    assert reg.get(" ALPHA ") == 1 and reg.get("beta") == 2 and reg.canonical("BETA") == "Beta"
    assert "beta" in reg and "gamma" not in reg and 3 not in reg
    # a name differing only in case from a taken one is refused, so a folded lookup is never ambiguous
    with pytest.raises(RegistryError, match="'ALPHA' differs only in case from the registered 'alpha'"):
        reg.register("ALPHA", 3)
    with pytest.raises(RegistryError, match="already registered; pass replace=True"):
        reg.register("alpha", 3)
    reg.register("alpha", 1)                      # the same object again: a no-op
    reg.register("alpha", 4, replace=True)
    reg["gamma"] = 5                               # the dict spelling replaces
    assert reg.get("alpha") == 4 and reg.get("gamma") == 5 and dict(reg) == {"alpha": 4, "Beta": 2, "gamma": 5}
    for bad in ("", " alpha", None):
        with pytest.raises(RegistryError, match="non-empty string without surrounding spaces"):
            reg.register(bad, 0)  # type: ignore[arg-type]
    copy = reg.copy()
    copy.unregister("gamma")
    assert "gamma" in reg and "gamma" not in copy


def test_unknown_name_is_one_line_with_the_closest_and_all_names():
    class ThingError(FeatureODEError, ValueError):
        pass

    reg: Registry[int] = Registry("thing", ThingError, hint="(or write an expression)")
    for n in ("displacement", "lazy", "agop"):
        reg.register(n, 0)
    with pytest.raises(ThingError) as info:
        reg.get("displacment")
    assert str(info.value) == ("unknown thing 'displacment' (did you mean 'displacement'?); valid things: "
                               "displacement, lazy, agop (or write an expression)")
    with pytest.raises(ThingError, match=r"^unknown thing 'zzz'; valid things"):
        reg.get("zzz")
    with pytest.raises(TypeError, match="must derive from FeatureODEError"):
        Registry("thing", ValueError)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------
# each kind
# ----------------------------------------------------------------------------------------------------------------
def test_activation_names_keep_their_case(monkeypatch):
    """``"Cubic"`` registered is found as written (the old lower-casing lookup never found it) and, by the folded
    rule, as ``"cubic"``. σ = u³ − u = He_3 + 2 He_1, so μ = (0, 2, 0, √6) at b = 0, s = 1 (μ_n = ⟨σ, He_n⟩/√n!)."""
    monkeypatch.setattr(activations, "ACTIVATIONS", activations.ACTIVATIONS.copy())
    register_activation("Cubic", "u**3 - u")
    assert get_activation("Cubic") is get_activation("cubic") is activations.ACTIVATIONS["Cubic"]
    mu = [get_activation("Cubic").hermite(n, 0.0, 1.0).value for n in range(4)]
    np.testing.assert_allclose(mu, [0.0, 2.0, 0.0, math.sqrt(6)], atol=1e-12)
    activations.ACTIVATIONS["sq"] = from_expression("u**2", name="sq")   # the old dict spelling still works
    assert get_activation("sq").name == "sq"
    with pytest.raises(ActivationError, match="must be an Activation"):
        activations.ACTIVATIONS["bad"] = "u**2"  # type: ignore[assignment]
    with pytest.raises(ActivationError, match=r"unknown activation 'relux' \(did you mean 'relu'\?\)"):
        get_activation("relux")


def test_closures_unknown_name_suggests():
    with pytest.raises(VariantError, match=r"unknown closure 'displacment' \(did you mean 'displacement'\?\)"):
        get_closure("displacment")
    assert get_closure("AGOP") is CLOSURES["agop"]


@dataclass(frozen=True)
class _Renamed(MeanField):
    """The meanfield parametrization under another name (so its physics is known: the meanfield one)."""

    name: str = "meanfield_renamed"


def test_a_parametrization_registered_after_import_is_accepted_by_the_config_check():
    raw = load_config(None).to_dict()
    raw["network"]["parametrization"] = "meanfield_renamed"
    with pytest.raises(ConfigError, match="parametrization 'meanfield_renamed' is not valid"):
        config_from_dict(raw)
    register_parametrization(_Renamed())
    try:
        cfg = config_from_dict(raw)
        assert cfg.network.parametrization == "meanfield_renamed"
        assert get_parametrization("meanfield_renamed").closure_prefactor(0.5) == 0.25   # q = γ²
        with pytest.raises(ParametrizationError, match="needs a Parametrization instance"):
            register_parametrization("ntk")  # type: ignore[arg-type]
    finally:
        PARAMETRIZATIONS.unregister("meanfield_renamed")


class _EchoBackend(NumPyBackend):
    """The NumPy printer under another name: a backend registered from outside compile.py."""

    name = "numpy_echo"
    version = "1"


def test_a_registered_backend_compiles_and_matches_numpy(tmp_path, monkeypatch):
    from _ode_theories import make_theory
    from featureode.ode.solve import system_inputs
    from featureode.ode.variants import Variant

    monkeypatch.setenv("FEATUREODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fcompile, "_LOADED", {})
    assert isinstance(BACKENDS["numba"], Backend)
    register_backend(_EchoBackend())
    try:
        raw = load_config(None).to_dict()
        raw["ode"]["backend"] = "numpy_echo"
        assert config_from_dict(raw).ode.backend == "numpy_echo"
        inputs, system = system_inputs(make_theory("staircase(2)"), Variant("displacement", scale=True))
        echo, ref = compile_system(system, "numpy_echo"), compile_system(system, "numpy")
        assert echo.path != ref.path and echo.backend == "numpy_echo"
        y = np.concatenate([np.linspace(0.1, 0.4, 2), np.linspace(-1.0, 1.5, 2)])
        np.testing.assert_array_equal(echo.rhs(y, *inputs), ref.rhs(y, *inputs))
        np.testing.assert_array_equal(echo.jac(y, *inputs), ref.jac(y, *inputs))
    finally:
        BACKENDS.unregister("numpy_echo")
    with pytest.raises(CompileError, match="must have a name, a version and a source"):
        register_backend(object())  # type: ignore[arg-type]
    with pytest.raises(CompileError, match=r"unknown backend 'numpy_echo'.*valid backends: numpy, numba"):
        compile_system(system, "numpy_echo")


class _Threads:
    """A thread-pool executor (the :class:`~featureode.workflow.executors.Executor` interface)."""

    def __init__(self, jobs: int, scheduler: str | None) -> None:
        self.workers = jobs
        self.capacity = 2 * jobs
        self._pool = cf.ThreadPoolExecutor(jobs)

    def submit(self, fn, arg):
        return self._pool.submit(fn, arg)

    def wait(self, futures):
        done, pending = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
        return set(done), set(pending)

    def close(self) -> None:
        self._pool.shutdown()


def test_a_registered_executor_runs_a_sweep(tmp_path):
    """A thread-pool executor registered by name runs an ODE-only sweep; its lazy t10 is the closed form
    ln 10 / (2 λ_β(0)) of the one-mode lazy flow (loss e^{−2λt})."""
    from featureode.kernel.theory import kernel_theory
    from featureode.workflow.grid import load_grid
    from featureode.workflow.sweeps import run_sweep

    executors.register_executor("threads", _Threads)
    try:
        ex = executors.make_executor("threads", 2)
        assert isinstance(ex, executors.Executor) and isinstance(ex, _Threads)
        (tmp_path / "grid.toml").write_text('[set]\n"data.dim" = 4\n"training.t_max" = 40.0\n'
                                            '"ode.variants" = ["lazy"]\n"ode.basis" = "target"\n[grid]\n"target.expr" = ["z0", "z1"]\n')
        try:
            res = run_sweep(load_grid(tmp_path / "grid.toml"), tmp_path / "out", ex, ode_only=True, progress=False)
        finally:
            ex.close()
        assert set(res.outcomes) == {"expr-z0", "expr-z1"} and not res.failed
        for expr in ("z0", "z1"):
            o = res.outcomes[f"expr-{expr}"]
            cfg = config_from_dict({"target": {"expr": expr}, "data": {"dim": 4}})
            lam = float(kernel_theory(cfg, basis="target").lambda_exact[0])
            assert o.variants["lazy"]["t10"] == pytest.approx(math.log(10) / (2 * lam), rel=1e-5)
    finally:
        executors.EXECUTORS.unregister("threads")
    from featureode.workflow.tasks import SweepError

    with pytest.raises(SweepError, match=r"unknown executor 'dsak' \(did you mean 'dask'\?\)"):
        executors.make_executor("dsak", 1)
