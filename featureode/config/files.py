"""Config files: the built-in default run (:data:`DEFAULT_PATH`) every file is laid over (:func:`merge_config`),
``--set table.key=value`` items (:func:`parse_set`, :func:`apply_sets`) and :func:`load_config`, which reads a TOML
file and checks it (:func:`featureode.config.runconfig.config_from_dict`).
"""
from __future__ import annotations

import copy
import functools
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

from featureode.config.rules import ConfigError, suggest
from featureode.config.runconfig import Config, config_from_dict
from featureode.config.sections import SECTIONS


#: The built-in default run (``featureode compare`` without a config); every config file is laid over it.
DEFAULT_PATH = Path(__file__).parent.parent / "defaults" / "default.toml"


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
