"""The rules of a config's keys: :data:`RULES` (the valid value of every numeric and choice key), the checks that
apply them (``_coerce``, one key at a time) and :class:`ConfigError`, the one-line error that names the key, the value
and the fix; :func:`suggest` (the closest valid name) and :func:`resolved_device` (what ``[training] device`` runs on).
"""
from __future__ import annotations

import difflib
import functools
import math
import numbers
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

from featureode.core.basis import BASES
from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry
from featureode.calculus.data import MAX_DIM
from featureode.config.sections import DEFAULT_LR_SCALE
from featureode.kernel.parametrization import GROUP_KEYS, PARAMETRIZATIONS


class ConfigError(FeatureODEError, ValueError):
    """A configuration that is invalid; the message names the key and the fix."""


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
            hint = ""
            if typ is list and isinstance(value, str):
                # e.g. --set ode.variants=[rational]: not TOML, so it arrived as text
                names = [x.strip().strip("'\"") for x in value.strip().strip("[]").split(",") if x.strip()]
                shown = ", ".join(f'"{x}"' for x in names) or '"name"'
                hint = f"; write a TOML list of quoted names: {key} = [{shown}] (--set '{section}.{key}=[{shown}]')"
            raise ConfigError(f"{where} must be {name}, got {value!r}{hint}")
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

