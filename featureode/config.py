"""Run configuration (theory §6): one TOML file drives ``kernel``, ``derive``, ``solve``, ``simulate``, ``compare``.

Every table and key is declared here with its default and its valid range (:data:`RULES`). Loading checks them all
and refuses a bad file with one line that names the key, the value and the fix: an unknown key or table (with the
closest valid name), a missing required key (``target.expr``), a value of the wrong type (a string for a number, a
fraction for an integer), a number outside its range (NaN and ±inf included), an unknown name for a choice key
(with the closest valid name), inconsistent ``[data]`` keys, an unparsable target and unknown variants.

Integers may be written as floats that are whole numbers (``width = 1e3`` is TOML's float 1000.0 and reads as
1000); ``width = 1.5`` is refused.

One set of defaults: a config file (:func:`load_config`) is laid over the built-in default run
``featureode/defaults/default.toml`` (:data:`DEFAULT_PATH`), so a file that gives only ``[target]`` runs with the
same settings as ``featureode compare`` without a file (``t_max = 300``, variants ``lazy``, ``displacement`` and
the reference ``rational``, the extended basis); the keys that default file does not set take the defaults of the dataclasses
below. ``[target] expr`` has no default in a file: a file (or ``--set``) must say what to learn. ``--set
table.key=value`` (:func:`parse_set`, values read as TOML literals) changes keys after the file and before every
check. :func:`config_from_dict` validates a dict as given (the Python API's low-level door: keys it lacks take the
dataclass defaults, not those of the default file; :func:`default_dict` is the default file as a dict).
"""
from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import json
import math
import numbers
import os
import re
import sys
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from featureode.core.basis import BASES
from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry
from featureode.calculus.activations import ActivationError, get_activation
from featureode.calculus.data import MAX_DIM, DataError, Spectrum
from featureode.kernel.parametrization import GROUP_KEYS, PARAMETRIZATIONS
from featureode.calculus.targets import Target, TargetError, check_target_text, parse_target


class ConfigError(FeatureODEError, ValueError):
    """A configuration that is invalid; the message names the key and the fix."""


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
    stop_loss: float = 0.0        # stop once the test loss L/L(0) ≤ stop_loss at a measurement (0: run to t_max)
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

_ODE_METHODS = ("rodas4", "RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")  # solve.COMPILED_METHODS + SCIPY_METHODS


# ----------------------------------------------------------------------------------------------------------------
# key rules
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    """A numeric key: integer or real, finite, in ``[lo, hi]`` (ends open when ``lo_open``/``hi_open``);
    ``optional``: the key may be absent (``None``); ``why``: the reason, shown with the error."""
    kind: type
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""
    optional: bool = False

    def range_text(self) -> str:
        """The valid range as text, e.g. ``> 0``, ``≥ 1``, ``in [0, 1)``."""
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '≥'} {self.lo:g}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '≤'} {self.hi:g}"
        return "finite"

    def contains(self, x: float) -> bool:
        """Whether ``x`` (finite) is in the range."""
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            return False
        return not (self.hi is not None and (x > self.hi or (self.hi_open and x == self.hi)))


@dataclass(frozen=True)
class Choice:
    """A string key with a fixed set of valid names (``pattern``: a regular expression for further valid names), or
    the names of a registry (``registry``: returns it), read when a config is checked, so a name registered after
    import (a plugin's) is valid; a registry lookup follows its case rule and stores the registered spelling."""
    fixed: tuple[str, ...] = ()
    pattern: str = ""
    registry: "Callable[[], Registry[Any]] | None" = None

    @property
    def options(self) -> tuple[str, ...]:
        """The valid names now."""
        return tuple(self.registry().names()) if self.registry is not None else self.fixed


def _backends() -> "Registry[Any]":
    from featureode.ode.compile import BACKENDS  # imported when a config is checked, not with the config module

    return BACKENDS


_POS: dict[str, Any] = dict(lo=0, lo_open=True)
#: The valid value of every key that is not a plain bool/string/list/table (those are type-checked from defaults).
RULES: dict[str, dict[str, "Num | Choice"]] = {
    "data": {
        "dim": Num(int, 1, MAX_DIM, why="the input dimension d; the spectrum, weights and samples hold d numbers"),
        "exponent": Num(float, 0, why="g_i ∝ (i + offset)^(−exponent) must be non-increasing (theory §1)"),
        "offset": Num(float, **_POS, why="the power law needs i + offset > 0 from i = 0"),
    },
    "network": {
        "width": Num(int, 1, why="the number of neurons N"),
        "richness": Num(float, **_POS, why="γ → 0 is the lazy limit, γ ≈ 0.5 rich"),
        "bias_std": Num(float, 0, why="the standard deviation σ_b of the initial biases"),
        "parametrization": Choice(registry=lambda: PARAMETRIZATIONS),
    },
    "training": {
        "batch": Num(int, 1, why="samples per SGD step"),
        "t_max": Num(float, **_POS, why="the gradient-flow time to train to"),
        "seed": Num(int, 0, 2**32, hi_open=True, why="seeds are 32-bit: larger ones would repeat smaller ones"),
        "device": Choice(("auto", "cpu", "cuda"), pattern=r"cuda:\d+"),
        "dtype": Choice(("float32", "float64")),
        "eta_max": Num(float, **_POS, why="the largest gradient-flow step η"),
        "eta_safety": Num(float, **_POS, why="η = eta_safety/λ_top; 0.5 is safe, ≥ 2 diverges"),
        "ntk_every": Num(int, 1, why="steps between measurements of λ_top"),
        "ntk_probe": Num(int, 1, why="samples in the probe set of λ_top"),
        "max_steps": Num(int, 1, why="the most SGD steps of a run"),
        "n_test": Num(int, 1, why="samples in the test set"),
        "n_points": Num(int, 1, 100_000, why="log-spaced measurement times (each a measurement of the network)"),
        "t_min": Num(float, **_POS, why="the first measurement time after t = 0 (log-spaced times)"),
        "checkpoint_every": Num(int, 0, why="steps between checkpoints; 0 saves only when interrupted"),
        "threads": Num(int, 0, why="torch CPU threads; 0 is torch's default"),
        "stop_loss": Num(float, 0, 1, hi_open=True, why="a floor on L/L(0); 0 runs to t_max"),
    },
    "ode": {
        "eigenvalues": Choice(("exact", "hea")),
        "basis": Choice(BASES),
        "kappa": Num(float, 0, why="the AGOP constant κ; leave it out to derive κ = γ² c_1/Λ_1²", optional=True),
        "extended_degree": Num(int, 0, why="extra degrees of the extended basis"),
        "extended_max_modes": Num(int, 1, 5000, why="the most modes of the extended basis (its Gram matrix costs "
                                  "~2.5e-4 s per mode pair)"),
        "method": Choice(_ODE_METHODS),
        "rtol": Num(float, 0, 1, lo_open=True, hi_open=True, why="the relative tolerance of solve_ivp"),
        "atol": Num(float, **_POS, why="the absolute tolerance of solve_ivp"),
        "n_points": Num(int, 2, 100_000, why="output times of the ODE solution (t = 0 and log-spaced times)"),
        "backend": Choice(registry=_backends),
    },
}


def suggest(key: str, options: list[str], what: str = "valid keys") -> str:
    lower = {o.lower(): o for o in options}
    close = difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.5)
    return f"; did you mean {lower[close[0]]!r}?" if close else f"; {what}: {', '.join(options)}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"{value!r} (a string; write numbers without quotes)"
    return repr(value)


def _check_num(where: str, value: Any, rule: Num) -> Any:
    if value is None and rule.optional:
        return None
    kind = "an integer" if rule.kind is int else "a number"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)   # numpy integers are integers
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be {kind} {rule.range_text()}, got {_shown(value)} ({rule.why})")
    if not math.isfinite(value):
        raise ConfigError(f"{where} is {value}; give a finite number {rule.range_text()} ({rule.why})")
    if rule.kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{where} must be an integer {rule.range_text()}, got {value!r} ({rule.why})")
            value = int(value)
    else:
        value = float(value)
    if not rule.contains(value):
        raise ConfigError(f"{where} must be {rule.range_text()}, got {value!r} ({rule.why})")
    return value


def _check_choice(where: str, value: Any, rule: Choice) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, rule.options))}, got {_shown(value)}")
    if rule.registry is not None and value in rule.registry():
        return rule.registry().canonical(value)
    if value in rule.options or (rule.pattern and re.fullmatch(rule.pattern, value)):
        return value
    raise ConfigError(f"{where} {value!r} is not valid" + suggest(value, list(rule.options), "valid values"))


def _coerce(section: str, key: str, value: Any, default: Any) -> Any:
    """``value`` of ``[section] key`` checked against its rule or, without one, against the default's type."""
    where = f"[{section}] {key}"
    if (section, key) == ("training", "lr_scale"):
        return _check_lr_scale(where, value)
    rule = RULES.get(section, {}).get(key)
    if isinstance(rule, Num):
        return _check_num(where, value, rule)
    if isinstance(rule, Choice):
        return _check_choice(where, value, rule)
    if default is None:  # [data] eigenvalues / covariance: lists, checked with the rest of [data]
        if value is not None and not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {_shown(value)}")
        return value
    for typ, name in ((bool, "true or false"), (str, "a string"), (list, "a list"), (dict, "a table")):
        if isinstance(default, typ) and not isinstance(value, typ):
            raise ConfigError(f"{where} must be {name}, got {value!r}")
    if isinstance(default, list) and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of names (strings), got {value!r}")
    return value


_LR_WHY = "the learning-rate multiplier of a parameter group; 0 freezes it"


def _check_lr_scale(where: str, value: Any) -> dict[str, float]:
    """``{a = η_a, w = η_w, b = η_b}`` as a full table of floats (missing groups: 1), each finite and ≥ 0, not all 0."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table {{a = …, w = …, b = …}} (readout, first layer, bias), got "
                          f"{_shown(value)}")
    out = dict(DEFAULT_LR_SCALE)
    for k, v in value.items():
        if k not in GROUP_KEYS:
            raise ConfigError(f"unknown group {k!r} in {where}" + suggest(str(k), list(GROUP_KEYS), "the groups are")
                              + " (a: readout, w: first-layer weights, b: biases)")
        out[k] = float(_check_num(f"{where} {k}", v, Num(float, 0, why=_LR_WHY)))
    if not any(out.values()):
        raise ConfigError(f"{where} freezes every group (a = w = b = 0), so nothing would train; give at least one "
                          "group a rate > 0")
    return out


# device files of an NVIDIA driver (Linux, WSL): without any of them CUDA cannot be available
_CUDA_DEVICE_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


@functools.lru_cache(maxsize=None)
def resolved_device(name: str) -> str:
    """What ``[training] device`` runs on: ``"cpu"`` or ``"cuda[:k]"`` (``"auto"``: CUDA when available).

    Imports torch only when a GPU driver is present (else ``"auto"`` is the CPU, found without the 1–2 s import);
    raises :class:`ConfigError` when CUDA is asked for and there is none."""
    if name == "cpu":
        return "cpu"
    if "torch" in sys.modules or any(os.path.exists(f) for f in _CUDA_DEVICE_FILES):
        import torch

        available = torch.cuda.is_available()
    else:
        available = False
    if name == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise ConfigError(f"[training] device = {name!r} but CUDA is not available here; use 'auto' or 'cpu'")
    return name


# ----------------------------------------------------------------------------------------------------------------
# the config
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Config:
    """A validated run configuration: one dataclass per table (theory §6)."""
    data: DataConfig = field(default_factory=DataConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    ode: ODEConfig = field(default_factory=ODEConfig)
    source: str = ""
    plugins: PluginsConfig = field(default_factory=PluginsConfig)

    def __repr__(self) -> str:
        n, o, t = self.network, self.ode, self.training
        return (f"Config({self.target.expr!r}, d = {self.data.dim}, {n.activation} N = {n.width}, γ = {n.richness:g}, "
                f"σ_b = {n.bias_std:g}; t_max = {t.t_max:g}, seed {t.seed}; ODE {', '.join(o.variants)} on the "
                f"{o.basis} basis" + (f"; from {self.source}" if self.source else "") + ")")

    # derived objects --------------------------------------------------------------------------------------------
    def spectrum(self) -> Spectrum:
        """The covariance spectrum of ``[data]`` (in descending order; a covariance is diagonalised)."""
        d = self.data
        key = "covariance" if d.covariance is not None else "eigenvalues" if d.eigenvalues is not None else None
        try:
            if key == "covariance":
                spec = Spectrum.from_covariance(d.covariance)
            elif key == "eigenvalues":
                spec = Spectrum.from_eigenvalues(d.eigenvalues)  # type: ignore[arg-type]  # key == "eigenvalues" means it is given
            else:
                return Spectrum.power_law(d.dim, d.exponent, d.offset)
        except DataError as exc:  # its message starts with the key's name ("covariance is not symmetric: …")
            raise ConfigError(f"[data] {exc}" if str(exc).startswith(key) else f"[data] {key}: {exc}") from None  # type: ignore[arg-type]  # key is set on these branches
        if spec.dim != d.dim:
            size = f"{spec.dim} entries" if key == "eigenvalues" else f"size {spec.dim} × {spec.dim}"
            raise ConfigError(f"[data] {key} has {size} but dim = {d.dim}; make them agree (set dim = {spec.dim})")
        return spec

    def target_obj(self, spectrum: Spectrum | None = None) -> Target:
        """The decomposed target of ``[target]`` under ``spectrum`` (default: :meth:`spectrum`)."""
        return parse_target(self.target.expr, spectrum or self.spectrum(), normalize=self.target.normalize)

    def to_dict(self) -> dict[str, Any]:
        """The tables as nested dicts (what ``config_from_dict`` reads back); ``plugins`` only when it lists any."""
        out = {name: asdict(getattr(self, name)) for name in SECTIONS}
        if self.plugins.modules or self.plugins.paths:
            out["plugins"] = asdict(self.plugins)
        return out

    def digest(self, sections: tuple[str, ...] = tuple(SECTIONS)) -> str:
        """Stable hash of the given sections, without the run-time-only keys (:data:`RUNTIME_KEYS`); it keys
        result caches and guards output folders (``device`` through :func:`resolved_device`)."""
        raw = self.to_dict()
        for key in RUNTIME_KEYS:
            sec, name = key.split(".")
            if key == "training.device":  # an explicit "cuda[:k]" is CUDA without asking torch
                dev = raw[sec][name]
                raw[sec][name] = "cuda" if dev.startswith("cuda") or resolved_device(dev) != "cpu" else "auto"
            else:
                raw[sec][name] = _DIGEST_AS[key]
        if raw["training"]["lr_scale"] == DEFAULT_LR_SCALE:  # the default is the old identity (no such key)
            del raw["training"]["lr_scale"]
        blob = json.dumps({k: v for k, v in raw.items() if k in sections}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **sections: dict[str, Any]) -> "Config":
        """A copy with some keys changed, e.g. ``cfg.replace(network={"richness": 0.1})``."""
        raw = self.to_dict()
        for sec, vals in sections.items():
            raw.setdefault(sec, {}).update(vals)
        return config_from_dict(raw, source=self.source)


def plugins_from_dict(table: Any, where: str = "[plugins]",
                      base_dir: "str | Path | None" = None) -> PluginsConfig:
    """Check a ``[plugins]`` table (``paths`` made absolute against ``base_dir``) and import its modules and the
    installed entry-point plugins (:mod:`featureode.core.plugins`); raises :class:`ConfigError`."""
    from featureode.core.plugins import PluginError, load_entry_points, load_modules, resolve_paths

    table = {} if table is None else table
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table, e.g. [plugins] modules = [\"mymodule\"]")
    names = [f.name for f in fields(PluginsConfig)]
    for k, v in table.items():
        if k not in names:
            raise ConfigError(f"unknown key {k!r} in {where}" + suggest(str(k), names))
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise ConfigError(f"{where} {k} must be a list of {'module names' if k == 'modules' else 'folders'} "
                              f"(strings), got {v!r}")
    plugins = PluginsConfig(list(table.get("modules", [])), resolve_paths(table.get("paths", []), base_dir))
    try:
        load_entry_points()
        load_modules(plugins.modules, plugins.paths, where=f"{where} modules")
    except PluginError as exc:
        raise ConfigError(str(exc)) from exc
    return plugins


def config_from_dict(raw: dict[str, Any], source: str = "<dict>", base_dir: "str | Path | None" = None) -> Config:
    """Validate a nested dict (as read from TOML) into a :class:`Config`; raises :class:`ConfigError`.

    ``[plugins]`` is read first: its modules (and the installed ``featureode.plugins`` entry points) are imported
    before any other key is checked, so names they register are valid; relative ``paths`` are taken against
    ``base_dir`` (the config file's folder; default the current folder)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a table of tables, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    for sec in raw:
        if sec not in SECTIONS and sec != "plugins":
            raise ConfigError(f"unknown config table [{sec}]"
                              + suggest(str(sec), [*SECTIONS, "plugins"], "valid tables"))
    plugins = plugins_from_dict(raw.pop("plugins", None), base_dir=base_dir)
    out: dict[str, Any] = {}
    for sec, cls in SECTIONS.items():
        vals = raw.get(sec, {})
        if not isinstance(vals, dict):
            raise ConfigError(f"[{sec}] must be a table, got {vals!r}")
        inst = cls()
        names = [f.name for f in fields(cls)]
        for k, v in vals.items():
            if k not in names:
                raise ConfigError(f"unknown key {k!r} in [{sec}]" + suggest(str(k), names))
            setattr(inst, k, _coerce(sec, k, v, getattr(inst, k)))
        out[sec] = inst
    cfg = Config(**out, source=source, plugins=plugins)
    _validate(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    """The checks that involve several keys or other modules (each key's own range is checked by ``_coerce``)."""
    if not cfg.target.expr.strip():
        raise ConfigError("missing required key: [target] expr (e.g. expr = \"staircase(2)\")")
    d, default = cfg.data, DataConfig()
    if d.eigenvalues is not None and d.covariance is not None:
        raise ConfigError("[data] eigenvalues and covariance are both given; keep one of them")
    if d.eigenvalues is not None or d.covariance is not None:
        given = "eigenvalues" if d.eigenvalues is not None else "covariance"
        unused = [k for k in ("exponent", "offset") if getattr(d, k) != getattr(default, k)]
        if unused:
            raise ConfigError(f"[data] {' and '.join(unused)} would be ignored, because [data] {given} is given; "
                              "remove one or the other")
        cfg.spectrum()  # entries, order, symmetry, positive definiteness and size = dim
    try:
        check_target_text(cfg.target.expr, d.dim)
    except TargetError as exc:
        raise ConfigError(f"[target] expr: {exc}") from None
    try:
        get_activation(cfg.network.activation)
    except ActivationError as exc:
        raise ConfigError(f"[network] activation: {exc}") from None
    t = cfg.training
    if not t.t_min < t.t_max:
        raise ConfigError(f"[training] t_min = {t.t_min:g} must be below t_max = {t.t_max:g} (the first log-spaced "
                          "measurement time after 0)")
    if not cfg.ode.variants:
        raise ConfigError("[ode] variants is empty; list at least one, e.g. [\"lazy\", \"displacement\"]")
    from featureode.ode.variants import VariantError, variants_from_config

    try:
        variants_from_config(cfg.ode, allow_replay=True)  # unknown variants, custom tables and ablated terms
    except VariantError as exc:
        raise ConfigError(str(exc) if str(exc).startswith("[ode") else f"[ode] variants: {exc}") from None


#: The built-in default run (``featureode compare`` without a config); every config file is laid over it.
DEFAULT_PATH = Path(__file__).parent / "defaults" / "default.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    if path.is_dir():
        raise ConfigError(f"config {str(path)!r} is a folder; give a TOML file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text (UTF-8) file; give a TOML config") from None


@functools.lru_cache(maxsize=1)
def _default_raw() -> dict[str, Any]:
    return _read_toml(DEFAULT_PATH)


def default_dict() -> dict[str, Any]:
    """The built-in default run (:data:`DEFAULT_PATH`) as the nested dict read from its TOML (a fresh copy)."""
    return copy.deepcopy(_default_raw())


def merge_config(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base``, table by table (a key of ``over`` replaces the one of ``base``; a table of
    tables such as ``[ode.custom]`` is merged one level further); neither argument is changed."""
    out = copy.deepcopy(base)
    for sec, vals in over.items():
        if isinstance(vals, dict) and isinstance(out.get(sec), dict):
            for k, v in vals.items():
                if isinstance(v, dict) and isinstance(out[sec].get(k), dict):
                    out[sec][k] = {**out[sec][k], **copy.deepcopy(v)}
                else:
                    out[sec][k] = copy.deepcopy(v)
        else:
            out[sec] = copy.deepcopy(vals)
    return out


def parse_set(item: str) -> tuple[tuple[str, ...], Any]:
    """One ``--set`` item ``table.key=value`` as ``((table, key, …), value)``. The value is read as a TOML literal
    (``0.1``, ``true``, ``[\"lazy\", \"agop\"]``, ``\"z0*z1\"``); text that is not one is taken as a string
    (``--set target.expr=z0*z1``). Deeper keys name tables of tables (``ode.custom.NAME.closure=...``). Raises
    :class:`ConfigError` naming the item for a malformed one or an unknown table or key."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    parts = tuple(p.strip() for p in key.split("."))
    if not sep or len(parts) < 2 or not all(parts):
        raise ConfigError(f"--set {item!r} must be TABLE.KEY=VALUE, e.g. --set network.richness=0.1")
    sec, name = parts[0], parts[1]
    if sec not in SECTIONS:
        raise ConfigError(f"--set {item!r}: unknown config table [{sec}]" + suggest(sec, list(SECTIONS),
                                                                                     "valid tables"))
    names = [f.name for f in fields(SECTIONS[sec])]
    if name not in names:
        raise ConfigError(f"--set {item!r}: unknown key {name!r} in [{sec}]" + suggest(name, names))
    if len(parts) > 2 and not isinstance(getattr(SECTIONS[sec](), name), dict):
        raise ConfigError(f"--set {item!r}: [{sec}] {name} is not a table; write --set {sec}.{name}=VALUE")
    try:
        value = tomllib.loads(f"v = {text}")["v"] if text else ""
    except tomllib.TOMLDecodeError:
        value = text
    return parts, value


def apply_sets(raw: dict[str, Any], sets: "Sequence[str]") -> dict[str, Any]:
    """``raw`` (a nested config dict) with every ``--set`` item of ``sets`` applied in order (:func:`parse_set`);
    ``raw`` itself is not changed."""
    out = copy.deepcopy(raw)
    for item in sets:
        parts, value = parse_set(item)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:-1])} is not a table in this config")
        node[parts[-1]] = value
    return out


def load_config(path: "str | Path | None" = None, sets: "Sequence[str]" = ()) -> Config:
    """Read a TOML config laid over the built-in default run (:data:`DEFAULT_PATH`: staircase(2), d = 16,
    γ = 0.5); ``None`` gives the default itself. ``sets``: ``--set`` items ``table.key=value`` applied after the
    file and before every check (:func:`apply_sets`); they are recorded in the config's ``source``."""
    sets = list(sets)
    if path is None:
        raw, source = default_dict(), str(DEFAULT_PATH)
    else:
        path = Path(path)
        given = _read_toml(path)
        if not isinstance(given, dict):  # pragma: no cover - tomllib always returns a table
            raise ConfigError(f"{path}: a config must be a table of tables")
        raw, source = given, str(path)
        target = given.get("target")
        if not (isinstance(target, dict) and "expr" in target) and not any(
                parse_set(s)[0][:2] == ("target", "expr") for s in sets):
            raise ConfigError(f"missing required key: [target] expr in {path} (e.g. expr = \"staircase(2)\"); "
                              "every other key defaults to the built-in run")
        raw = merge_config(default_dict(), given)
    if sets:
        raw = apply_sets(raw, sets)
        source += "".join(f" --set {s}" for s in sets)
    return config_from_dict(raw, source=source, base_dir=None if path is None else Path(path).parent)
