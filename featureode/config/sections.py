"""The tables of a run configuration (theory §6): one dataclass per TOML table with its keys' defaults
(:data:`SECTIONS`), the sections that define an MLP simulation and the run-time-only keys left out of a config's
identity (:data:`RUNTIME_KEYS`). The valid range of each key is in :mod:`featureode.config.rules`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DataConfig:
    """``[data]``: power-law spectrum ``g_i ∝ (i + offset)^(−exponent)``, or explicit eigenvalues/covariance."""
    dim: int = 16
    exponent: float = 1.5
    offset: float = 3.0
    eigenvalues: list | None = None   # g_0 ≥ g_1 ≥ … > 0 (descending, theory §1); len = dim
    covariance: list | None = None    # a symmetric positive definite dim × dim matrix (x in the user's coordinates)


@dataclass
class TargetConfig:
    """``[target]``: the target expression ``f*`` and whether to normalise it to unit variance."""
    expr: str = ""
    normalize: bool = True


@dataclass
class NetworkConfig:
    """``[network]``: activation σ, width N, richness γ, bias scale σ_b, parametrization."""
    activation: str = "relu"
    width: int = 1024
    richness: float = 0.5
    bias_std: float = 0.5
    parametrization: str = "meanfield"


#: ``[training] lr_scale`` when not given: plain SGD. At this value the key stays out of :meth:`Config.digest`, so run
#: folders made before the key existed keep their identity.
DEFAULT_LR_SCALE = {"a": 1.0, "w": 1.0, "b": 1.0}


@dataclass
class TrainingConfig:
    """``[training]``: SGD, step-size rule, measurement and run-time settings of the MLP."""
    batch: int = 2048
    t_max: float = 1000.0
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    eta_max: float = 1.0          # upper bound on the gradient-flow step η
    eta_safety: float = 0.5       # η ≤ eta_safety / λ_top(t)
    ntk_every: int = 50           # re-measure λ_top every K steps
    ntk_probe: int = 256          # probe-set size for λ_top
    max_steps: int = 200_000
    n_test: int = 20_000
    n_points: int = 60            # log-spaced measurement times
    t_min: float = 0.1            # first measurement time after 0
    checkpoint_every: int = 2000  # steps between checkpoints (0: only when interrupted)
    # CPU threads of torch (0: torch's default, one per core). 1 by default: on a shared 2-core machine whose other
    # core is busy the default run took 125–317 s with torch's 2 threads against 34 s with one.
    threads: int = 1
    compile: bool = True          # torch.compile the SGD step and measurement kernel (eager fallback)
    stop_loss: float = 0.0        # stop once L/L(0) ≤ stop_loss at a measurement (the exact loss with exact_loss, else
                                  # the test loss; 0: run to t_max)
    # also record the exact population loss ½E[(f − f*)²] at every measurement (relu and erf networks:
    # featureode.kernel.population), beside the test-set loss; the crossing times of both are kept
    exact_loss: bool = False
    # per-group learning-rate multipliers {a = η_a, w = η_w, b = η_b} (readout, first layer, bias; 0 freezes a group),
    # read through the parametrization object (featureode.kernel.parametrization.parametrization_of)
    lr_scale: dict = field(default_factory=lambda: dict(DEFAULT_LR_SCALE))


@dataclass
class ODEConfig:
    """``[ode]``: variants, ``λ_β(0)`` (exact/hea), mode set, solver and code-generation settings."""
    variants: list = field(default_factory=lambda: ["lazy", "displacement"])
    eigenvalues: str = "exact"    # "exact" | "hea"
    basis: str = "target"         # "target" | "extended"
    ablate: list = field(default_factory=list)
    kappa: float | None = None    # AGOP constant; None → derived γ² c_1 / Λ_1²
    scale: bool = False
    extended_degree: int = 2
    extended_max_modes: int = 40
    method: str = "rodas4"       # compiled RODAS4 (featureode.ode.integrate), or a scipy solve_ivp method
    rtol: float = 1e-8
    atol: float = 1e-10
    n_points: int = 200
    backend: str = "numpy"
    custom: dict = field(default_factory=dict)   # named variant tables, see featureode.ode.variants


@dataclass
class PluginsConfig:
    """``[plugins]``: user modules imported before the rest of the config is checked (:mod:`featureode.core.plugins`),
    and ``paths``, folders put on ``sys.path`` first (relative to the file; stored absolute). Not part of the
    config's digest: where a closure is defined does not change what it computes."""
    modules: list = field(default_factory=list)
    paths: list = field(default_factory=list)


SECTIONS = {"data": DataConfig, "target": TargetConfig, "network": NetworkConfig,
            "training": TrainingConfig, "ode": ODEConfig}
#: The sections that define an MLP simulation (its results depend on nothing else).
MLP_SECTIONS = ("data", "target", "network", "training")

#: Run-time-only keys ("table.key"): they change how a run is carried out, not what it computes, so they are not
#: part of a config's identity (:meth:`Config.digest`, which keys output folders and result caches): a folder made
#: with other values of these keys is reused. Measured on CPU with the same seed: ``checkpoint_every`` (0 vs 7)
#: leaves every number bit-identical; ``threads`` (1 vs 2) is bit-identical on the default run (N = 1024, B = 2048,
#: to t = 3), while ``threads`` and ``compile`` change float32 round-off on a small one (N = 128, B = 512, d = 8, to
#: t = 30: up to 6e-8 in L/L(0), far below seed-to-seed noise), so a reused result may differ from a fresh one there.
#: ``device`` enters the digest through what it resolves to: ``"auto"`` and ``"cpu"`` are one identity on a machine
#: without CUDA, while CPU and CUDA runs (other kernels, reduction orders and batching) are different identities.
RUNTIME_KEYS = ("training.checkpoint_every", "training.threads", "training.compile", "training.device")
# the value a run-time key is hashed as, so that digests made before these keys left the hash stay valid where they
# can: checkpoint_every and compile at their defaults, threads at 1, the value of every validation-suite run (all 25
# cases of the shipped suites keep their digests; a config that ran with the old default threads = 0, such as the
# default `compare`, gets a new digest once); ``device`` is hashed as "auto" on the CPU and as "cuda" otherwise
_DIGEST_AS = {"training.checkpoint_every": 2000, "training.threads": 1, "training.compile": True}
