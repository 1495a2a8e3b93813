"""One result type for a curve of the ODE or of the network (theory §6), and its one serialiser and loader.

A :class:`Trajectory` holds what a solver or a simulation produced over its output times ``t``:

* ``loss`` — the ODE's ``L/L(0)`` or the network's test loss ``L(t)`` (not normalised; :attr:`Trajectory.ratio` is);
* ``in_support_loss`` — ``Σ_β (v_β − f_β)² / Σ_β v_β²`` on the target's modes;
* ``f`` (``n_t × M``), ``f_stderr`` (measured only), ``lam`` (``λ_β(t)``, ``n_t × M``), ``r`` (``r_i(t)``,
  ``n_t × d``);
* ``arrays`` — any further named arrays over ``t`` (``D``, ``s``, ``eta``, ``a2``, ``lambda_parts/readout`` …; a
  ``/`` in a name nests it in JSON: ``{"lambda_parts": {"readout": …}}``);
* ``meta`` — JSON scalars and small records (digest, device, solver info, …);
* ``status`` — :class:`Status`: complete or stopped early, where it stopped, and the error if it failed.

``t50``/``t10`` are carried as produced (solver events for the ODE, theory §5 interpolation for the network).

Files: :meth:`Trajectory.save` writes ``STEM.json`` (every field, theory §6 keys, flat) and ``STEM.npz`` (the same
arrays in binary, plus any extra arrays such as final parameters) atomically (temp file + rename).
:meth:`Trajectory.load` reads the JSON and checks the npz beside it, so a damaged file is reported, never reused.
The helpers :func:`write_json`, :func:`write_text`, :func:`write_bytes`, :func:`write_npz` are the one way this
package writes results.
"""
from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from featureode.core.cache import atomic_bytes

from featureode.core.errors import FeatureODEError
from featureode.results.metrics import normalised

#: JSON keys of the core fields (theory §6 names) and the attribute each is stored in.
_CORE = {"t": "t", "loss": "loss", "in_support_loss": "in_support_loss", "f": "f", "f_stderr": "f_stderr",
         "lambda": "lam", "r": "r"}
_STATUS = ("complete", "reached_t", "error")
_HEAD = ("kind", "name", "modes", "target", "t50", "t10")


class TrajectoryFileError(FeatureODEError, ValueError):
    """A result file is missing, damaged or inconsistent with its companion; the message names it and the fix."""


@dataclass(frozen=True)
class Status:
    """How a trajectory ended: ``complete`` (reached its horizon), ``reached_t`` (the last time computed) and
    ``error`` (``None``, or why it stopped: divergence, non-finite state, out of steps)."""

    complete: bool = True
    reached_t: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Complete and without error."""
        return self.complete and self.error is None


@dataclass(frozen=True)
class Trajectory:
    """A curve of the ODE (``kind = "ode"``, ``name`` = variant) or of the network (``kind = "mlp"``)."""

    kind: str
    name: str
    modes: tuple[str, ...]
    target: np.ndarray
    t: np.ndarray
    loss: np.ndarray
    f: np.ndarray | None = None
    lam: np.ndarray | None = None
    r: np.ndarray | None = None
    in_support_loss: np.ndarray | None = None
    f_stderr: np.ndarray | None = None
    t50: float | None = None
    t10: float | None = None
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    status: Status = field(default_factory=Status)

    def __post_init__(self) -> None:
        if self.kind not in ("ode", "mlp"):
            raise ValueError(f"Trajectory kind must be 'ode' or 'mlp', got {self.kind!r}")
        n = np.asarray(self.t).shape[0] if np.ndim(self.t) else 0
        for key, attr in _CORE.items():
            val = getattr(self, attr)
            if val is not None and np.asarray(val).shape[:1] != (n,):
                raise ValueError(f"Trajectory {self.name!r}: {key} has {np.asarray(val).shape[:1]} rows for "
                                 f"{n} times")

    # derived values ------------------------------------------------------------------------------------------------
    @property
    def ratio(self) -> np.ndarray:
        """``L(t)/L(0)`` (:func:`featureode.results.metrics.normalised`)."""
        try:
            return normalised(self.loss)
        except ValueError as exc:
            raise ValueError(f"trajectory {self.name!r}: {exc}") from None

    @property
    def end_t(self) -> float:
        """The last time computed (``status.reached_t`` when set, else ``t[-1]``; 0 for an empty curve)."""
        if self.status.reached_t is not None:
            return float(self.status.reached_t)
        return float(self.t[-1]) if len(self.t) else 0.0

    def get(self, name: str) -> np.ndarray | None:
        """A core field by its JSON key (``"lambda"``, ``"f"`` …) or a named array (``"a2"``,
        ``"lambda_parts/readout"``); ``None`` if absent."""
        if name in _CORE:
            return getattr(self, _CORE[name])
        return self.arrays.get(name)

    @classmethod
    def failed(cls, name: str, modes: Sequence[str], target: Any, error: str,
               meta: Mapping[str, Any] | None = None) -> "Trajectory":
        """An ODE trajectory with no curve, for a variant that failed before producing one (``error`` kept)."""
        return cls("ode", name, tuple(str(m) for m in modes), np.asarray(target, float), np.zeros(0), np.zeros(0),
                   meta=dict(meta or {}), status=Status(complete=False, reached_t=0.0, error=error))

    def with_status(self, **changes: Any) -> "Trajectory":
        """A copy with some :class:`Status` fields changed."""
        return replace(self, status=replace(self.status, **changes))

    def __repr__(self) -> str:
        n = len(self.t)
        span = f"t in [{_g(self.t[0])}, {_g(self.t[-1])}]" if n else "no curve"
        return (f"Trajectory({self.kind} {self.name!r}: {n} times, {span}, {len(self.modes)} modes; "
                f"t50 = {_g(self.t50)}, t10 = {_g(self.t10)}; {_state(self.status)})")

    def to_pandas(self) -> Any:
        """The curves as one long :class:`pandas.DataFrame`, a row per (time, quantity, component): columns
        ``kind``, ``name``, ``t``, ``quantity`` (``loss`` as stored, ``ratio`` = ``L(t)/L(0)``,
        ``in_support_loss``, ``f``, ``f_stderr``, ``lambda``, ``r`` and every named array, e.g. ``D``, ``s``, ``a2``,
        ``lambda_parts/readout``), ``component`` (the mode for per-mode quantities, the direction ``i`` for ``r``,
        empty for scalar series) and ``value``."""
        pd = _pandas()
        n = len(self.t)
        t = np.asarray(self.t, float)
        frames = []
        try:
            ratio = self.ratio if n else None
        except ValueError:  # L(0) = 0 or not finite: no ratio
            ratio = None
        series = [("loss", self.loss), ("ratio", ratio)]
        series += [(key, getattr(self, attr)) for key, attr in _CORE.items() if key not in ("t", "loss")]
        series += [(k, v) for k, v in self.arrays.items()]
        for key, val in series:
            if val is None:
                continue
            arr = np.asarray(val, float)
            if arr.shape[:1] != (n,) or arr.ndim > 2:
                continue
            if arr.ndim == 1:
                comps: list[str | None]
                comps, arr = [None], arr[:, None]
            elif key != "r" and arr.shape[1] == len(self.modes):
                comps = list(self.modes)
            else:
                comps = [str(i) for i in range(arr.shape[1])]
            frames.append(pd.DataFrame({"t": np.repeat(t, len(comps)), "quantity": key,
                                        "component": np.tile(np.array(comps, dtype=object), n),
                                        "value": arr.reshape(-1)}))
        cols = ["kind", "name", "t", "quantity", "component", "value"]
        if not frames:
            return pd.DataFrame(columns=cols)
        df = pd.concat(frames, ignore_index=True)
        df.insert(0, "name", self.name)
        df.insert(0, "kind", self.kind)
        return df[cols]

    # JSON ------------------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A flat dict with theory §6 keys: ``modes``, ``target``, ``t``, ``loss``, …, ``t50``, ``t10``, every named
        array (``/`` nested), ``complete``, ``reached_t``, ``error`` (when set) and the ``meta`` keys."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "modes": list(self.modes),
                               "target": np.asarray(self.target, float)}
        for key, attr in _CORE.items():
            val = getattr(self, attr)
            if val is not None:
                out[key] = np.asarray(val, float)
        out["t50"], out["t10"] = self.t50, self.t10
        for name, arr in self.arrays.items():
            head, _, tail = name.partition("/")
            value = np.asarray(arr)
            if tail:
                out.setdefault(head, {})[tail] = value
            else:
                out[name] = value
        out["complete"], out["reached_t"] = self.status.complete, self.end_t
        if self.status.error is not None:
            out["error"] = self.status.error
        for k, v in self.meta.items():
            if k in out:
                raise ValueError(f"trajectory {self.name!r}: meta key {k!r} clashes with a field")
            out[k] = v
        return json_ready(out)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], kind: str | None = None, name: str | None = None) -> "Trajectory":
        """The inverse of :meth:`to_json`. List values become named arrays, dicts of lists nested arrays, anything
        else ``meta``. ``kind``/``name`` default to the stored ones (an ``ode.json`` variant entry stores neither)."""
        data = dict(data)
        kind = kind or data.pop("kind", None) or "ode"
        name = name or data.pop("name", None) or kind
        data.pop("kind", None), data.pop("name", None)
        modes = tuple(str(m) for m in data.pop("modes", ()))
        target = np.asarray(data.pop("target", []), float)
        core: dict[str, np.ndarray | None] = {}
        for key, attr in _CORE.items():
            val = data.pop(key, None)
            core[attr] = None if val is None else _array(val)
        t = core.pop("t")
        t = np.zeros(0) if t is None else t
        loss = core.pop("loss")
        loss = np.zeros(0) if loss is None else loss
        t50, t10 = data.pop("t50", None), data.pop("t10", None)
        status = Status(complete=bool(data.pop("complete", True)), reached_t=data.pop("reached_t", None),
                        error=data.pop("error", None))
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {}
        for k, v in data.items():
            if _is_series(v, t.size):
                arrays[k] = _array(v)
            elif isinstance(v, dict) and v and all(_is_series(x, t.size) for x in v.values()):
                arrays.update({f"{k}/{sub}": _array(x) for sub, x in v.items()})
            else:
                meta[k] = v
        return cls(kind, name, modes, target, t, loss, t50=t50, t10=t10, arrays=arrays, meta=meta, status=status,
                   **core)

    # files -----------------------------------------------------------------------------------------------------------
    def npz_arrays(self) -> dict[str, np.ndarray]:
        """Every array of the trajectory by its JSON key (nested names keep their ``/``), plus ``modes``/``target``."""
        out: dict[str, np.ndarray] = {"modes": np.array(self.modes, dtype=str), "target": np.asarray(self.target)}
        for key, attr in _CORE.items():
            val = getattr(self, attr)
            if val is not None:
                out[key] = np.asarray(val, float)
        out.update({k: np.asarray(v) for k, v in self.arrays.items()})
        return out

    def save(self, folder: "str | Path", stem: str | None = None,
             extra_arrays: Mapping[str, np.ndarray] | None = None) -> Path:
        """Write ``folder/STEM.json`` and ``folder/STEM.npz`` atomically (``stem`` default: ``kind``); returns the
        JSON path. ``extra_arrays`` (e.g. final parameters) go into the npz only."""
        folder = Path(folder)
        stem = stem or self.kind
        write_npz(folder / f"{stem}.npz", {**self.npz_arrays(), **(extra_arrays or {})})
        path = folder / f"{stem}.json"
        write_json(path, self.to_json())
        return path

    @classmethod
    def load(cls, folder: "str | Path", stem: str = "mlp", kind: str | None = None) -> "Trajectory":
        """Read ``folder/STEM.json`` (written by :meth:`save`), checking that ``STEM.npz`` beside it is readable.
        ``kind`` defaults to the stored one, else to ``stem`` when that is a kind (``mlp.json`` files written before
        :class:`Trajectory` store no kind). Raises :class:`TrajectoryFileError` naming the damaged or missing file."""
        path = Path(folder) / f"{stem}.json"
        data = read_json(path)
        check_npz(Path(folder) / f"{stem}.npz")
        if kind is None and isinstance(data, dict) and "kind" not in data and stem in ("ode", "mlp"):
            kind = stem
        try:
            if not isinstance(data, dict):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            return cls.from_json(data, kind=kind)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise TrajectoryFileError(f"{path} does not hold a trajectory ({exc}); delete it or rerun with "
                                      "--force") from exc


def _g(x: Any) -> str:
    """A number for a one-line summary (4 significant digits; a dash for none)."""
    return "—" if x is None else f"{float(x):.4g}"


def _state(status: Status) -> str:
    if status.error is not None:
        text = " ".join(status.error.split())
        return "error: " + (text if len(text) <= 60 else text[:57] + "...")
    return "ok" if status.complete else f"stopped at t = {_g(status.reached_t)}"


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("to_pandas needs pandas; install it with `pip install pandas` (or featureode[pandas])") \
            from None
    return pandas


def _array(v: Any) -> np.ndarray:
    """A JSON list (``None`` = NaN, nested for 2-D) as a float array."""
    def nan(x: Any) -> Any:
        return [nan(y) for y in x] if isinstance(x, list) else (math.nan if x is None else x)
    return np.asarray(nan(list(v)), dtype=float) if len(v) else np.zeros(0)


def _is_series(v: Any, n: int) -> bool:
    """A JSON list with one entry per output time (``n > 0``)."""
    return isinstance(v, list) and n > 0 and len(v) == n and all(
        x is None or isinstance(x, (int, float, list)) for x in v)


# ----------------------------------------------------------------------------------------------------------------
# the package's one way to write and read result files
# ----------------------------------------------------------------------------------------------------------------
def json_ready(obj: Any) -> Any:
    """Strict JSON form: NumPy arrays and scalars as lists and numbers, non-finite floats as ``None``, tuples as lists.
    Anything else that JSON cannot hold raises ``TypeError`` (no silent ``str``)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if len(obj) >= 8 and isinstance(obj[0], (float, list)):  # a series: converted at once when numeric
            try:
                arr = np.asarray(obj)
            except ValueError:  # ragged
                arr = None
            if arr is not None and arr.dtype.kind == "f":
                return json_ready(arr)
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biu":
            return obj.tolist()
        if obj.dtype.kind == "f":
            if np.isfinite(obj).all():
                return obj.astype(float).tolist()
            return np.where(np.isfinite(obj), obj.astype(float), None).tolist()  # type: ignore[call-overload]  # an object array: None where not finite
        return json_ready(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        x = float(obj)
        return x if math.isfinite(x) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def write_bytes(path: "str | Path", data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temp file in the same folder, then rename)."""
    atomic_bytes(Path(path), data)


def write_text(path: "str | Path", text: str, durable: bool = True) -> None:
    """Write ``text`` to ``path`` atomically (a temp file in the same folder, then rename; ``durable``: as in
    :func:`featureode.core.cache.atomic_bytes`)."""
    atomic_bytes(Path(path), text.encode(), durable)


def _dumps(obj: Any, indent: int, level: int = 0) -> str:
    """``json.dumps(obj, indent=indent)``, except that a list is written on one line by the C encoder unless its
    first entry is an object or a list of objects or lists (an output's series are numbers: one per line was slow to
    write and to read). The text is the same JSON either way; only the layout differs."""
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(obj, dict) and obj:
        items = [f"{inner}{json.dumps(k)}: {_dumps(v, indent, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and (isinstance(obj[0], dict) or (
            isinstance(obj[0], list) and obj[0] and isinstance(obj[0][0], (dict, list)))):
        return "[\n" + ",\n".join(inner + _dumps(v, indent, level + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, allow_nan=False)


def write_json(path: "str | Path", obj: Any, indent: int | None = 1, durable: bool = True) -> None:
    """Write ``obj`` as strict JSON (:func:`json_ready`) atomically: objects indented by ``indent`` (``None``: one
    line), lists of numbers and strings on one line (``durable``: as in :func:`featureode.core.cache.atomic_bytes`)."""
    ready = json_ready(obj)
    text = json.dumps(ready, allow_nan=False) if indent is None else _dumps(ready, indent)
    write_text(path, text, durable)


def write_npz(path: "str | Path", arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays as an ``.npz`` atomically."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]  # numpy's stub types **kwds as the allow_pickle flag
    atomic_bytes(Path(path), buf.getvalue())


def read_json(path: "str | Path") -> Any:
    """Read a JSON result file; a missing or damaged file raises :class:`TrajectoryFileError` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise TrajectoryFileError(f"{path} is missing") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrajectoryFileError(f"{path} is damaged ({exc.__class__.__name__}: {exc}); delete it or rerun with "
                                  "--force to recompute it") from exc


def check_npz(path: "str | Path") -> None:
    """Raise :class:`TrajectoryFileError` unless ``path`` is a readable ``.npz`` (every member decompresses)."""
    path = Path(path)
    if not path.exists():
        raise TrajectoryFileError(f"{path} is missing beside its JSON; rerun with --force to recompute both")
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        if bad is not None:
            raise zipfile.BadZipFile(f"member {bad} is damaged")
        with np.load(path, allow_pickle=False) as z:
            for k in z.files:
                z[k]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise TrajectoryFileError(f"{path} is damaged ({exc}); delete it or rerun with --force to recompute "
                                  "it") from exc


@dataclass(frozen=True)
class ODEResult:
    """Every variant of one config solved on one mode set: what ``featureode solve`` writes as ``ode.json`` /
    ``ode.npz`` (theory §6: ``{"modes", "target", "variants": {NAME: {...}}}`` plus ``eigenvalues``, ``basis``,
    ``t_max``). A variant that failed keeps its partial curve, with ``status.error`` set."""

    modes: tuple[str, ...]
    target: np.ndarray
    variants: Mapping[str, Trajectory]
    eigenvalues: str = "exact"
    basis: str = "target"
    t_max: float | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        each = "; ".join(f"{k} t50 = {_g(v.t50)}, t10 = {_g(v.t10)}" + ("" if v.status.ok else f" ({_state(v.status)})")
                         for k, v in self.variants.items())
        n = len(self.variants)
        return (f"ODEResult({n} variant{'' if n == 1 else 's'} on the {self.basis} basis ({len(self.modes)} modes), "
                f"t_max = {_g(self.t_max)}: {each})")

    def to_pandas(self) -> Any:
        """Every variant's :meth:`Trajectory.to_pandas` in one long :class:`pandas.DataFrame` (``name`` is the
        variant)."""
        pd = _pandas()
        frames = [tr.to_pandas() for tr in self.variants.values()]
        return pd.concat(frames, ignore_index=True) if frames else Trajectory.failed("", (), [], "").to_pandas()

    @property
    def errors(self) -> dict[str, str]:
        """``{variant: error}`` for the variants that failed."""
        return {k: v.status.error for k, v in self.variants.items() if v.status.error is not None}

    def to_json(self) -> dict[str, Any]:
        """``ode.json`` content; each variant entry is its :meth:`Trajectory.to_json` without the shared keys."""
        variants = {}
        for name, tr in self.variants.items():
            entry = tr.to_json()
            for k in ("kind", "name", "modes", "target"):
                entry.pop(k, None)
            variants[name] = entry
        return json_ready({"modes": list(self.modes), "target": np.asarray(self.target, float).tolist(),
                           "variants": variants, "eigenvalues": self.eigenvalues, "basis": self.basis,
                           "t_max": self.t_max, **self.meta})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ODEResult":
        """The inverse of :meth:`to_json`."""
        data = dict(data)
        modes = tuple(str(m) for m in data.pop("modes"))
        target = np.asarray(data.pop("target"), float)
        variants = {name: Trajectory.from_json({**entry, "modes": list(modes), "target": target.tolist()},
                                               kind="ode", name=name)
                    for name, entry in data.pop("variants").items()}
        return cls(modes, target, variants, eigenvalues=data.pop("eigenvalues", "exact"),
                   basis=data.pop("basis", "target"), t_max=data.pop("t_max", None), meta=data)

    def save(self, folder: "str | Path", stem: str = "ode") -> Path:
        """Write ``folder/STEM.json`` and ``folder/STEM.npz`` (arrays ``modes``, ``target``, ``NAME/FIELD``)."""
        folder = Path(folder)
        arrays: dict[str, np.ndarray] = {"modes": np.array(self.modes, dtype=str), "target": np.asarray(self.target)}
        for name, tr in self.variants.items():
            arrays.update({f"{name}/{k}": v for k, v in tr.npz_arrays().items() if k not in ("modes", "target")})
        write_npz(folder / f"{stem}.npz", arrays)
        path = folder / f"{stem}.json"
        write_json(path, self.to_json())
        return path

    @classmethod
    def load(cls, folder: "str | Path", stem: str = "ode") -> "ODEResult":
        """Read what :meth:`save` wrote; a damaged or missing file raises :class:`TrajectoryFileError`."""
        path = Path(folder) / f"{stem}.json"
        data = read_json(path)
        check_npz(Path(folder) / f"{stem}.npz")
        try:
            if not isinstance(data, dict):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            return cls.from_json(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise TrajectoryFileError(f"{path} does not hold ODE results ({exc}); delete it or rerun with "
                                      "--force") from exc
