"""featureode: symbolic-numeric feature ODE for two-layer MLPs on anisotropic Gaussian data.

The public API is flat: ``import featureode as fo`` then ``fo.load_config``, ``fo.kernel_theory``,
``fo.solve_variant``, … (every name is in ``__all__``). Names are loaded on first use, so ``import featureode``
imports nothing heavy (no SymPy, NumPy or torch) until one of them is touched.

Layers (imports point only downward): ``core`` < ``results`` < ``calculus`` < ``kernel`` < ``ode`` < ``config`` <
``sim`` < ``export`` < ``workflow`` < ``cli``. Notation and the model: the documentation's "Theory and notation"
page (``docs/theory.md``).
"""
# Each public name and the module that defines it. The flat namespace resolves a name by importing its module on
# first access (PEP 562 module __getattr__); ``__all__`` and ``dir(featureode)`` list them all.
_EXPORTS: dict[str, str] = {
    # configuration
    "Config": "featureode.config.runconfig",
    "ConfigError": "featureode.config.rules",
    "config_from_dict": "featureode.config.runconfig",
    "load_config": "featureode.config.files",
    # the error base every user-facing error derives from, and the registries' type
    "FeatureODEError": "featureode.core.errors",
    "Registry": "featureode.core.registry",
    # calculus: Hermite modes, spectra, activations, targets
    "Mode": "featureode.calculus.hermite",
    "Spectrum": "featureode.calculus.data",
    "ACTIVATIONS": "featureode.calculus.activations",
    "Activation": "featureode.calculus.activation_calculus",
    "from_expression": "featureode.calculus.activations",
    "get_activation": "featureode.calculus.activations",
    "register_activation": "featureode.calculus.activations",
    "Target": "featureode.calculus.targets",
    "parse_target": "featureode.calculus.targets",
    # kernel at initialisation
    "KernelTheory": "featureode.kernel.theory",
    "kernel_report": "featureode.kernel.theory",
    "kernel_theory": "featureode.kernel.theory",
    "kernel_theory_batch": "featureode.kernel.theory",
    "Network": "featureode.kernel.network",
    "register_parametrization": "featureode.kernel.parametrization",
    "population_loss": "featureode.kernel.population",
    "PopulationLoss": "featureode.kernel.population",
    # the feature ODE: terms, variants, code generation, integration
    "System": "featureode.ode.terms",
    "build_system": "featureode.ode.terms",
    "Variant": "featureode.ode.variants",
    "closure_names": "featureode.ode.variants",
    "register_closure": "featureode.ode.variants",
    "compile_system": "featureode.ode.compile",
    "register_backend": "featureode.ode.compile",
    "solve_batch": "featureode.ode.solve",
    "solve_config": "featureode.ode.solve",
    "solve_variant": "featureode.ode.solve",
    "replay_run": "featureode.ode.replay",
    "meanfield_trajectory": "featureode.ode.meanfield",
    # results
    "ODEResult": "featureode.results.trajectory",
    "Trajectory": "featureode.results.trajectory",
    "Ratio": "featureode.results.metrics",
    "crossing_time": "featureode.results.metrics",
    # simulation of the network
    "Simulation": "featureode.sim.mlp",
    "simulate_batch": "featureode.sim.mlp",
    "simulate_config": "featureode.sim.mlp",
    # export: LaTeX, reports, figures
    "derive_document": "featureode.export.latex",
    "derive_fragment": "featureode.export.latex",
    "system_latex": "featureode.export.latex",
    "save_figure": "featureode.export.style",
    "variant_colour": "featureode.export.style",
    "exact_vs_hea_figure": "featureode.export.hea_figure",
    "Report": "featureode.export.report",
    "build_report": "featureode.export.report",
    "report_figure": "featureode.export.report",
    "diagnostics_figure": "featureode.export.diagnostics",
    # workflow: compare, grids, sweeps, phase diagrams
    "compare_config": "featureode.workflow.compare",
    "Grid": "featureode.workflow.grid",
    "load_grid": "featureode.workflow.grid",
    "suite_names": "featureode.workflow.grid",
    "make_executor": "featureode.workflow.executors",
    "register_executor": "featureode.workflow.executors",
    "run_suite": "featureode.workflow.sweeps",
    "run_sweep": "featureode.workflow.sweeps",
    "read_results": "featureode.workflow.table",
    "load_sweep": "featureode.workflow.table",
    "phase_figure": "featureode.workflow.plot",
    # the version (featureode/_version.py is its one source)
    "__version__": "featureode._version",
}

__all__ = sorted(name for name in _EXPORTS if name != "__version__")


def __getattr__(name: str) -> object:
    """Import the module that defines a public name on first access and keep the value here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'featureode' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (loaded or not), the version and the sub-packages already imported."""
    loaded = {n for n in globals() if not n.startswith("_") and n != "TYPE_CHECKING"}
    return sorted(loaded | set(_EXPORTS))


TYPE_CHECKING = False
if TYPE_CHECKING:  # static analysers (type checkers, the docs' griffe) see the names without importing anything
    from featureode._version import __version__
    from featureode.calculus.activation_calculus import Activation
    from featureode.calculus.activations import ACTIVATIONS, from_expression, get_activation, register_activation
    from featureode.calculus.data import Spectrum
    from featureode.calculus.hermite import Mode
    from featureode.calculus.targets import Target, parse_target
    from featureode.config.files import load_config
    from featureode.config.rules import ConfigError
    from featureode.config.runconfig import Config, config_from_dict
    from featureode.core.errors import FeatureODEError
    from featureode.core.registry import Registry
    from featureode.export.diagnostics import diagnostics_figure
    from featureode.export.hea_figure import exact_vs_hea_figure
    from featureode.export.latex import derive_document, derive_fragment, system_latex
    from featureode.export.report import Report, build_report, report_figure
    from featureode.export.style import save_figure, variant_colour
    from featureode.kernel.network import Network
    from featureode.kernel.parametrization import register_parametrization
    from featureode.kernel.population import PopulationLoss, population_loss
    from featureode.kernel.theory import KernelTheory, kernel_report, kernel_theory, kernel_theory_batch
    from featureode.ode.compile import compile_system, register_backend
    from featureode.ode.meanfield import meanfield_trajectory
    from featureode.ode.replay import replay_run
    from featureode.ode.solve import solve_batch, solve_config, solve_variant
    from featureode.ode.terms import System, build_system
    from featureode.ode.variants import Variant, closure_names, register_closure
    from featureode.results.metrics import Ratio, crossing_time
    from featureode.results.trajectory import ODEResult, Trajectory
    from featureode.sim.mlp import Simulation, simulate_batch, simulate_config
    from featureode.workflow.compare import compare_config
    from featureode.workflow.executors import make_executor, register_executor
    from featureode.workflow.grid import Grid, load_grid, suite_names
    from featureode.workflow.plot import phase_figure
    from featureode.workflow.sweeps import run_suite, run_sweep
    from featureode.workflow.table import load_sweep, read_results
