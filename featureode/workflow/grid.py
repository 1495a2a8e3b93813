"""Grid files (theory §7): a base config plus axes, read into the points of a sweep.

A grid file is TOML with the optional tables ``[plugins]`` (modules imported first, here and in every worker, as in
a config file), ``[set]`` (overrides of the base), ``[grid]`` (a cartesian product over
every key listed), ``[zip]`` (keys varied together, equal lengths, crossed with ``[grid]``) and ``[sweep]`` (seeds,
run names, the ``t_max = "auto"`` rule), and an optional top-level ``base = "config.toml"`` (relative to the grid
file; else the built-in default config). Keys are ``"table.key"`` and must name a config key of
:mod:`featureode.config`.

Points come in this order: the ``[zip]`` tuples outermost, then the ``[grid]`` keys in file order, the last fastest
(as :func:`itertools.product`). A point's run folder is named by ``[sweep] name`` (a template such as
``"{target.expr}_d{data.dim}"``, each value written as text with non-alphanumerics replaced by ``_``) or by its
varied values; seed ``s ≠ 0`` appends ``_s<s>``.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from featureode.config import (SECTIONS, Config, ConfigError, config_from_dict, load_config, plugins_from_dict,
                               suggest)

#: The value of ``training.t_max`` that asks for the horizon of :func:`featureode.workflow.sweeps.auto_t_max`.
AUTO = "auto"
#: Keys a grid file may hold at top level and in ``[sweep]``.
TOP_KEYS = ("base", "plugins", "set", "grid", "zip", "sweep")
SWEEP_KEYS = ("seeds", "name", "description", "t_max_factor", "t_max_cap")
#: Where the validation suites shipped with the package live.
SUITES_DIR = Path(__file__).parents[1] / "suites"
#: Every config key as ``"table.key"``.
CONFIG_KEYS = tuple(f"{sec}.{f.name}" for sec, cls in SECTIONS.items() for f in fields(cls))


class GridError(ConfigError):
    """A grid file that is invalid; the message names the key (or the point) and the fix."""


def slug(value: Any) -> str:
    """A value as part of a folder name: floats as ``%g``, text with non-alphanumerics replaced by ``_``."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, dict)):
        value = json.dumps(value)
    text = str(value)
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_").replace("__", "_")


#: The longest run-folder name in bytes; a longer one keeps its first part and ends in a hash of the whole.
MAX_NAME_BYTES = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(name: str) -> str:
    """A run-folder name that stays inside the sweep folder: one path component of ASCII letters, digits and
    ``._+-`` (anything else, separators included, becomes ``_``), no ``..``, no leading ``.``, at most
    :data:`MAX_NAME_BYTES` bytes (longer names keep their first part and end in ``_`` and 10 hex digits of the
    SHA-256 of the whole name, so distinct long names stay distinct)."""
    text = _UNSAFE.sub("_", name)
    while ".." in text:
        text = text.replace("..", "_")
    text = re.sub(r"_+", "_", text).lstrip(".")
    text = text or "point"
    if len(text.encode()) > MAX_NAME_BYTES:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        text = f"{text[:MAX_NAME_BYTES - 11].rstrip('_.')}_{digest}"
    return text


def _unique(values: list[Any]) -> list[Any]:
    """``values`` without repeats (a value given twice is one point), in first-appearance order."""
    out, seen = [], set()
    for v in values:
        key = json.dumps(v, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


@dataclass(frozen=True)
class Axis:
    """One independent direction of a grid: a ``[grid]`` key alone, or all ``[zip]`` keys together."""

    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]  # one tuple (a value per key) per position along the axis

    @property
    def label(self) -> str:
        """The keys joined by commas (how ``featureode plot`` names a zipped axis)."""
        return ",".join(self.keys)


@dataclass(frozen=True)
class Point:
    """One point of a grid: its position, the value of every varied key, and its run-folder name (seed 0)."""

    index: int
    values: dict[str, Any]
    name: str

    def describe(self) -> str:
        """``point 3 (network.richness = 0.15, data.dim = 16)``."""
        body = ", ".join(f"{k} = {v!r}" for k, v in self.values.items())
        return f"point {self.index}" + (f" ({body})" if body else "")

    def run_name(self, seed: int) -> str:
        """Folder of this point's run with ``seed`` (seed 0 keeps the plain name)."""
        return self.name if seed == 0 else f"{self.name}_s{seed}"


@dataclass(frozen=True)
class Grid:
    """A parsed grid file: the base config (as a nested dict, after ``[set]``), the axes and the sweep options."""

    source: str
    base: dict[str, dict[str, Any]]
    axes: tuple[Axis, ...]
    seeds: tuple[int, ...]
    name: str = ""
    description: str = ""
    name_template: str | None = None
    t_max_factor: float = 2.0
    t_max_cap: float = math.inf

    @property
    def keys(self) -> tuple[str, ...]:
        """Every varied key, in column order (zip keys first, then grid keys)."""
        return tuple(k for ax in self.axes for k in ax.keys)

    @property
    def size(self) -> int:
        """Number of points (without seeds)."""
        return math.prod(len(ax.values) for ax in self.axes)

    @property
    def n_runs(self) -> int:
        """Number of runs: points × seeds."""
        return self.size * len(self.seeds)

    def fixed(self) -> dict[str, Any]:
        """What every point shares (base, varied keys, horizon rule): two grids with the same ``fixed()`` differ only
        in their axis values and seeds, so one may extend the other in the same output folder."""
        return {"base": self.base, "keys": list(self.keys), "t_max_factor": self.t_max_factor,
                "t_max_cap": None if math.isinf(self.t_max_cap) else self.t_max_cap}

    #: Above this many points :meth:`points` refuses (a grid that large is a typo, or needs splitting).
    MAX_POINTS = 100_000

    def points(self) -> list[Point]:
        """Every point in order (see the module docstring); names are unique and safe (:func:`safe_name`): two
        points that a name template maps to one folder are refused, naming both."""
        if self.size > self.MAX_POINTS:
            raise GridError(f"{self.source} has {self.size} points, more than {self.MAX_POINTS}; split the grid")
        out: list[Point] = []
        seen: dict[str, Any] = {}
        for i, combo in enumerate(itertools.product(*(ax.values for ax in self.axes))):
            values = {k: v for ax, vals in zip(self.axes, combo) for k, v in zip(ax.keys, vals)}
            raw = self.raw_config(Point(i, values, ""), 0) if self.name_template is not None else None
            name = safe_name(self._name(values, raw))
            if name in seen:
                if self.name_template is not None:
                    raise GridError(f"{self.source}: [sweep] name = {self.name_template!r} gives the same run folder "
                                    f"{name!r} to {seen[name].describe()} and {Point(i, values, name).describe()}; "
                                    "put every varied key in it")
                name = safe_name(f"{name}_{hashlib.sha256(json.dumps(values, default=str).encode()).hexdigest()[:6]}")
            seen[name] = Point(i, values, name)
            out.append(seen[name])
        return out

    def _name(self, values: dict[str, Any], raw: dict[str, dict[str, Any]] | None) -> str:
        """The run-folder name of a point: the template filled from its config ``raw`` (needed only then), else the
        varied values."""
        if self.name_template is not None:
            return re.sub(r"\{([^}]*)\}", lambda m: slug(raw[m.group(1).split(".")[0]][m.group(1).split(".")[1]]),  # type: ignore[index]  # raw is built whenever there is a template
                          self.name_template)
        if not values:
            return "base"
        parts = [f"{k.split('.')[-1]}{slug(v)}" if isinstance(v, (int, float)) else f"{k.split('.')[-1]}-{slug(v)}"
                 for k, v in values.items()]
        name = "_".join(parts)
        return name if len(name) <= 80 else f"point_{hashlib.sha256(name.encode()).hexdigest()[:10]}"

    def raw_config(self, point: Point, seed: int) -> dict[str, dict[str, Any]]:
        """The nested config dict of ``point`` with ``seed`` (``training.t_max`` may still be :data:`AUTO`)."""
        raw = _copy_config(self.base)
        for key, value in point.values.items():
            sec, k = key.split(".")
            raw.setdefault(sec, {})[k] = copy.deepcopy(value)
        raw.setdefault("training", {})["seed"] = seed
        return raw


def _copy_config(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of a nested config dict that shares nothing mutable with it: its tables copied, their lists and tables
    deep-copied, numbers and strings shared (``copy.deepcopy`` of the whole costs ≈ 0.1 ms a run, paid per run and
    per check of a sweep)."""
    return {sec: {k: copy.deepcopy(v) if isinstance(v, (list, dict)) else v for k, v in vals.items()}
            if isinstance(vals, dict) else copy.deepcopy(vals) for sec, vals in raw.items()}


def probe_config(raw: dict[str, dict[str, Any]], source: str) -> Config:
    """The config of ``raw`` with ``training.t_max = AUTO`` replaced by a placeholder horizon (1.0): every check
    and every shape of the run, without the horizon (which needs the kernel). ``raw`` is not changed
    (:func:`~featureode.config.config_from_dict` works on its own copy)."""
    training = raw.get("training")
    if isinstance(training, dict) and training.get("t_max") == AUTO:
        raw = {**raw, "training": {**training, "t_max": 1.0}}
    return config_from_dict(raw, source=source)


def check_config(raw: dict[str, dict[str, Any]], what: str) -> None:
    """Validate a raw config whose ``training.t_max`` may be :data:`AUTO`; errors are prefixed with ``what``."""
    try:
        probe_config(raw, what)
    except ConfigError as exc:
        raise GridError(f"{what}: {exc}") from None


def _check_key(key: Any, where: str, source: str) -> tuple[str, str]:
    if not isinstance(key, str) or key.count(".") != 1:
        raise GridError(f"{source}: {where} key {key!r} must be written \"table.key\" (e.g. \"network.width\")"
                        + (suggest(key, list(CONFIG_KEYS)) if isinstance(key, str) else ""))
    if key not in CONFIG_KEYS:
        raise GridError(f"{source}: unknown key {key!r} in {where}" + suggest(key, list(CONFIG_KEYS)))
    if key == "training.seed":
        raise GridError(f"{source}: {where} sets \"training.seed\"; list the seeds in [sweep] seeds = [...] instead")
    return tuple(key.split("."))  # type: ignore[return-value]


def _axis_values(key: str, values: Any, where: str, source: str) -> list[Any]:
    if not isinstance(values, list):
        raise GridError(f"{source}: {where} {key!r} must be a list of values, got {values!r}")
    if not values:
        raise GridError(f"{source}: {where} {key!r} is an empty axis; give at least one value")
    return values


def grid_from_dict(raw: dict[str, Any], source: str = "<grid>", base_dir: "str | Path" = ".") -> Grid:
    """Validate a grid read from TOML (see the module docstring) into a :class:`Grid`.

    Checks every key and every axis (a value listed twice is one point); :func:`check_points` checks each point's
    config."""
    if not isinstance(raw, dict):
        raise GridError(f"{source}: a grid is a table of [set], [grid], [zip], [sweep] (and base), got "
                        f"{type(raw).__name__} {raw!r:.60}")
    for k in raw:
        if k not in TOP_KEYS:
            raise GridError(f"{source}: unknown grid entry {k!r}" + suggest(k, list(TOP_KEYS))
                            + " (config keys go in [set] as \"table.key\")")
    for k in ("set", "grid", "zip", "sweep"):
        if k in raw and not isinstance(raw[k], dict):
            raise GridError(f"{source}: [{k}] must be a table")
    try:  # the grid's plugins first: the base config and every point may name what they register
        plugins = plugins_from_dict(raw.get("plugins"), f"{source}: [plugins]", base_dir)
    except ConfigError as exc:
        raise GridError(str(exc)) from None
    base_path = raw.get("base")
    if base_path is not None and not isinstance(base_path, str):
        raise GridError(f"{source}: base must be a path to a config file, got {base_path!r}")
    if base_path is not None:
        path = Path(base_dir) / base_path
        if not path.exists():
            raise GridError(f"{source}: base config {str(path)!r} does not exist (base is relative to the grid file)")
        base = load_config(path).to_dict()
    else:
        base = load_config(None).to_dict()
    if plugins.modules or plugins.paths:  # every point's config carries them, so each worker imports them
        had = base.setdefault("plugins", {"modules": [], "paths": []})
        had["modules"] = list(dict.fromkeys([*had.get("modules", []), *plugins.modules]))
        had["paths"] = list(dict.fromkeys([*had.get("paths", []), *plugins.paths]))
    for key, value in raw.get("set", {}).items():
        sec, k = _check_key(key, "[set]", source)
        base[sec][k] = value

    axes: list[Axis] = []
    zipped = raw.get("zip", {})
    if zipped:
        cols = {k: _axis_values(k, v, "[zip]", source) for k, v in zipped.items()}
        for k in cols:
            _check_key(k, "[zip]", source)
        lengths = {k: len(v) for k, v in cols.items()}
        if len(set(lengths.values())) > 1:
            raise GridError(f"{source}: [zip] axes have unequal lengths ("
                            + ", ".join(f"{k}: {n}" for k, n in lengths.items()) + "); give each the same number "
                            "of values")
        axes.append(Axis(tuple(cols), tuple(_unique(list(zip(*cols.values()))))))
    for key, values in raw.get("grid", {}).items():
        _check_key(key, "[grid]", source)
        if key in zipped:
            raise GridError(f"{source}: {key!r} is both in [grid] and [zip]; keep it in one")
        axes.append(Axis((key,), tuple((v,) for v in _unique(_axis_values(key, values, "[grid]", source)))))
    for ax in axes:
        for key in ax.keys:
            if key in raw.get("set", {}):
                raise GridError(f"{source}: {key!r} is both in [set] and an axis; keep it in one")

    sweep = raw.get("sweep", {})
    for k in sweep:
        if k not in SWEEP_KEYS:
            where = (f"; a config key's values to sweep go in [grid] (every combination) or [zip] (side by side), "
                     f"a fixed value in [set]" if k in CONFIG_KEYS else "")
            raise GridError(f"{source}: unknown key {k!r} in [sweep]" + suggest(k, list(SWEEP_KEYS)) + where)
    seeds = sweep.get("seeds", [0])
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds)):
        raise GridError(f"{source}: [sweep] seeds must be a non-empty list of integers in [0, 2^32) (seeds are "
                        f"32-bit), got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise GridError(f"{source}: [sweep] seeds lists a seed twice: {seeds!r}")
    template = sweep.get("name")
    if template is not None:
        if not isinstance(template, str):
            raise GridError(f"{source}: [sweep] name must be a text template, got {template!r}")
        for ref in re.findall(r"\{([^}]*)\}", template):
            if ref not in CONFIG_KEYS:
                raise GridError(f"{source}: [sweep] name refers to {{{ref}}}, which is not a config key"
                                + suggest(ref, list(CONFIG_KEYS)))
    factor, cap = sweep.get("t_max_factor", 2.0), sweep.get("t_max_cap", math.inf)
    for k, v in (("t_max_factor", factor), ("t_max_cap", cap)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or (k == "t_max_factor"
                                                                                    and not math.isfinite(v)):
            raise GridError(f"{source}: [sweep] {k} must be a positive number"
                            f"{' (finite)' if k == 't_max_factor' else ''}, got {v!r}")
    description = sweep.get("description", "")
    if not isinstance(description, str):
        raise GridError(f"{source}: [sweep] description must be text, got {description!r}")

    return Grid(source=source, base=base, axes=tuple(axes), seeds=tuple(seeds), name=Path(source).stem,
                description=description, name_template=template, t_max_factor=float(factor), t_max_cap=float(cap))


def check_points(grid: Grid, points: list[Point] | None = None, progress: bool = True) -> None:
    """Every point's config is valid (with seed 0; seeds change nothing else); the error names the point. Over
    1000 points a progress bar (stderr) shows the checks."""
    from tqdm.auto import tqdm  # widgets in a notebook

    pts = points if points is not None else grid.points()
    for p in tqdm(pts, desc="checking points", unit="point", disable=not progress or len(pts) <= 1000,
                  leave=False):
        check_config(grid.raw_config(p, grid.seeds[0]), p.describe())


def load_grid(path: "str | Path") -> Grid:
    """Read and validate a grid file (the base config is relative to it)."""
    path = Path(path)
    if not path.exists():
        raise GridError(f"grid file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise GridError(f"{path}: not a text (UTF-8) file ({exc.reason} at byte {exc.start}); a grid file is "
                        "TOML") from None
    return grid_from_dict(raw, source=str(path), base_dir=path.parent)


def suite_path(name: str) -> Path:
    """The grid file of a validation suite shipped with the package (``featureode/suites/NAME.toml``)."""
    path = SUITES_DIR / f"{name}.toml"
    if not path.exists():
        known = suite_names()
        raise GridError(f"unknown suite {name!r}" + suggest(name, known) if known else f"unknown suite {name!r}")
    return path


def suite_names() -> list[str]:
    """Names of the validation suites shipped with the package."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))
