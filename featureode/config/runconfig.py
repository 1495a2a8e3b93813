"""The validated run configuration :class:`Config` (derived objects, digest, replace) and
:func:`config_from_dict`, which checks a nested dict key by key (:mod:`featureode.config.rules`) and across keys,
after importing the modules of ``[plugins]`` (:func:`plugins_from_dict`).
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from featureode.calculus.activations import ActivationError, get_activation
from featureode.calculus.data import DataError, Spectrum
from featureode.calculus.targets import Target, TargetError, check_target_text, parse_target
from featureode.config.rules import ConfigError, _coerce, resolved_device, suggest
from featureode.config.sections import (
    _DIGEST_AS,
    DEFAULT_LR_SCALE,
    RUNTIME_KEYS,
    SECTIONS,
    DataConfig,
    NetworkConfig,
    ODEConfig,
    PluginsConfig,
    TargetConfig,
    TrainingConfig,
)


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
        if not raw["training"]["exact_loss"]:  # likewise: runs without the exact loss keep their digests
            del raw["training"]["exact_loss"]
        blob = json.dumps({k: v for k, v in raw.items() if k in sections}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **sections: dict[str, Any]) -> "Config":
        """A copy with some keys changed, e.g. ``cfg.replace(network={"richness": 0.1})``."""
        raw = self.to_dict()
        for sec, vals in sections.items():
            raw.setdefault(sec, {}).update(vals)
        return config_from_dict(raw, source=self.source)


def require_config(cfg: object, who: str, error: type[Exception] = ConfigError) -> Config:
    """``cfg`` itself when it is a :class:`Config`; else ``error`` with one line that names what came and the fix
    (the public functions that take a config call it first, so ``None`` or a path is not an ``AttributeError``)."""
    if isinstance(cfg, Config):
        return cfg
    if isinstance(cfg, (str, Path)):
        raise error(f"{who} needs a Config, got the {type(cfg).__name__} {_short(str(cfg))!r}; load the file "
                    f"first and pass what featureode.load_config(path) returns")
    raise error(f"{who} needs a Config, got {type(cfg).__name__} {_short(repr(cfg))}; load a file with "
                "featureode.load_config(path), or build one with featureode.config.config_from_dict(dict)")


def _short(text: str, n: int = 60) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


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
