"""Run configuration (DESIGN §6): one TOML file drives ``kernel``, ``derive``, ``solve``, ``simulate``, ``compare``.

Every table and key is declared here with its default; an unknown key is an error that names it and suggests the
closest valid key, and a missing required key (``target.expr``) is an error too.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .activations import get_activation
from .data import Spectrum
from .targets import Target, parse_target


class ConfigError(ValueError):
    """A configuration that is invalid; the message names the key and the fix."""


@dataclass
class DataConfig:
    """``[data]``: power-law spectrum ``g_i ∝ (i + offset)^(−exponent)``, or explicit eigenvalues/covariance."""
    dim: int = 16
    exponent: float = 1.5
    offset: float = 3.0
    eigenvalues: list | None = None
    covariance: list | None = None


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
    checkpoint_every: int = 2000
    threads: int = 0              # 0 → torch default
    compile: bool = True          # torch.compile the SGD step and measurement kernel (eager fallback)
    stop_loss: float = 0.0        # stop once the test loss L/L(0) ≤ stop_loss at a measurement (0: run to t_max)


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
    method: str = "rodas4"       # compiled RODAS4 (featureode.integrate), or a scipy solve_ivp method
    rtol: float = 1e-8
    atol: float = 1e-10
    n_points: int = 200
    backend: str = "numpy"
    custom: dict = field(default_factory=dict)   # named variant tables, see featureode.variants


SECTIONS = {"data": DataConfig, "target": TargetConfig, "network": NetworkConfig,
            "training": TrainingConfig, "ode": ODEConfig}
#: The sections that define an MLP simulation (its results depend on nothing else).
MLP_SECTIONS = ("data", "target", "network", "training")


@dataclass
class Config:
    """A validated run configuration: one dataclass per table (DESIGN §6)."""
    data: DataConfig = field(default_factory=DataConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    ode: ODEConfig = field(default_factory=ODEConfig)
    source: str = ""

    # derived objects --------------------------------------------------------------------------------------------
    def spectrum(self) -> Spectrum:
        """The covariance spectrum of ``[data]``."""
        d = self.data
        if d.covariance is not None:
            return Spectrum.from_covariance(d.covariance)
        if d.eigenvalues is not None:
            sp_ = Spectrum.from_eigenvalues(d.eigenvalues)
            if sp_.dim != d.dim:
                raise ConfigError(f"[data] eigenvalues has {sp_.dim} entries but dim = {d.dim}; make them agree")
            return sp_
        return Spectrum.power_law(d.dim, d.exponent, d.offset)

    def target_obj(self, spectrum: Spectrum | None = None) -> Target:
        """The decomposed target of ``[target]`` under ``spectrum`` (default: :meth:`spectrum`)."""
        return parse_target(self.target.expr, spectrum or self.spectrum(), normalize=self.target.normalize)

    def to_dict(self) -> dict[str, Any]:
        """The tables as nested dicts (what ``config_from_dict`` reads back)."""
        return {name: asdict(getattr(self, name)) for name in SECTIONS}

    def digest(self, sections: tuple[str, ...] = tuple(SECTIONS)) -> str:
        """Stable hash of the given sections (used to key caches and guard output folders)."""
        blob = json.dumps({k: v for k, v in self.to_dict().items() if k in sections}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **sections: dict[str, Any]) -> "Config":
        """A copy with some keys changed, e.g. ``cfg.replace(network={"richness": 0.1})``."""
        raw = self.to_dict()
        for sec, vals in sections.items():
            raw.setdefault(sec, {}).update(vals)
        return config_from_dict(raw, source=self.source)


def _suggest(key: str, options: list[str]) -> str:
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(options)}"


def _coerce(section: str, key: str, value: Any, default: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"[{section}] {key} is nan; give a number")
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"[{section}] {key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"[{section}] {key} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"[{section}] {key} must be a number, got {value!r}")
        return float(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"[{section}] {key} must be a string, got {value!r}")
    if isinstance(default, list) and not isinstance(value, list):
        raise ConfigError(f"[{section}] {key} must be a list, got {value!r}")
    if isinstance(default, dict) and not isinstance(value, dict):
        raise ConfigError(f"[{section}] {key} must be a table, got {value!r}")
    return value


def config_from_dict(raw: dict[str, Any], source: str = "<dict>") -> Config:
    """Validate a nested dict (as read from TOML) into a :class:`Config`."""
    raw = copy.deepcopy(raw)
    for sec in raw:
        if sec not in SECTIONS:
            raise ConfigError(f"unknown config table [{sec}]" + _suggest(sec, list(SECTIONS)))
    out: dict[str, Any] = {}
    for sec, cls in SECTIONS.items():
        vals = raw.get(sec, {})
        if not isinstance(vals, dict):
            raise ConfigError(f"[{sec}] must be a table")
        inst = cls()
        names = [f.name for f in fields(cls)]
        for k, v in vals.items():
            if k not in names:
                raise ConfigError(f"unknown key {k!r} in [{sec}]" + _suggest(k, names))
            setattr(inst, k, _coerce(sec, k, v, getattr(inst, k)))
        out[sec] = inst
    cfg = Config(**out, source=source)
    _validate(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    if not cfg.target.expr:
        raise ConfigError("missing required key: [target] expr (e.g. expr = \"staircase(2)\")")
    if cfg.data.dim < 1:
        raise ConfigError(f"[data] dim must be ≥ 1, got {cfg.data.dim}")
    get_activation(cfg.network.activation)
    n, t = cfg.network, cfg.training
    if n.width < 1:
        raise ConfigError(f"[network] width must be ≥ 1, got {n.width}")
    if not n.richness > 0:
        raise ConfigError(f"[network] richness γ must be > 0 (γ → 0 is the lazy limit), got {n.richness}")
    if n.bias_std < 0:
        raise ConfigError(f"[network] bias_std must be ≥ 0, got {n.bias_std}")
    if n.parametrization != "meanfield":
        raise ConfigError(f"[network] parametrization {n.parametrization!r} is not implemented; use 'meanfield'")
    for key in ("batch", "n_test", "max_steps"):
        if getattr(t, key) < 1:
            raise ConfigError(f"[training] {key} must be ≥ 1, got {getattr(t, key)}")
    if not t.t_max > 0:
        raise ConfigError(f"[training] t_max must be > 0, got {t.t_max}")
    if t.device not in ("auto", "cpu", "cuda") and not t.device.startswith("cuda:"):
        raise ConfigError(f"[training] device must be 'auto', 'cpu' or 'cuda[:k]', got {t.device!r}")
    if not 0 <= t.stop_loss < 1:
        raise ConfigError(f"[training] stop_loss must be in [0, 1) (a floor on L/L(0); 0 disables it), got {t.stop_loss}")
    if t.dtype not in ("float32", "float64"):
        raise ConfigError(f"[training] dtype must be 'float32' or 'float64', got {t.dtype!r}")
    if cfg.ode.eigenvalues not in ("exact", "hea"):
        raise ConfigError(f"[ode] eigenvalues must be 'exact' or 'hea', got {cfg.ode.eigenvalues!r}")
    if cfg.ode.basis not in ("target", "extended"):
        raise ConfigError(f"[ode] basis must be 'target' or 'extended', got {cfg.ode.basis!r}")


def load_config(path: "str | Path | None" = None) -> Config:
    """Read a TOML config; ``None`` gives the built-in default (staircase(2), d = 16, γ = 0.5)."""
    if path is None:
        path = Path(__file__).parent / "defaults" / "default.toml"
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return config_from_dict(raw, source=str(path))
