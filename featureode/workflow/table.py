"""The results table of a sweep (``results.csv``/``results.parquet``), seed statistics, acceptance bands and the
Markdown summary."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from featureode.results.metrics import Ratio
from featureode.results.trajectory import write_text
from featureode.workflow.grid import Grid, Point
from featureode.workflow.tasks import RunOutcome, RunTask, SweepError

#: Columns of ``results.csv`` after the varied keys (theory §7; ``t_max`` is the resolved horizon).
RESULT_COLUMNS = ("seed", "variant", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "mlp_t50", "mlp_t10",
                  "t_max", "status", "run")
#: Cases with γ at or below this are "lazy" for the acceptance rule of theory §5.
LAZY_RICHNESS = 0.01
#: Acceptance bands (ODE/MLP ratios of t50 and t10) of the ``displacement`` closure (theory §5), and the tighter
#: ones a first prototype reached, reported side by side.
BANDS = {"displacement": ((0.85, 1.25), (0.75, 1.30)), "displacement_prototype": ((0.93, 1.20), (0.75, 1.25))}


# ----------------------------------------------------------------------------------------------------------------
# results table
# ----------------------------------------------------------------------------------------------------------------
def _cell(value: Any) -> Any:
    """A value for the table: numbers and text as they are, lists and tables as JSON, ``None`` empty."""
    if value is None:
        return None
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def result_rows(grid: Grid, runs: Sequence[tuple[Point, RunTask]], outcomes: dict[str, RunOutcome]
                ) -> list[dict[str, Any]]:
    """One row per (point, seed, variant) of the finished runs, in grid order (columns: the varied keys, then
    :data:`RESULT_COLUMNS`). A failed run gets a row per configured variant carrying its error."""
    rows = []
    for point, task in runs:
        out = outcomes.get(task.name)
        if out is None:
            continue
        keys = {k: _cell(v) for k, v in point.values.items()}
        variants = out.variants or {str(v): {} for v in task.raw.get("ode", {}).get("variants", [])}
        for name, v in variants.items():
            status = out.status if not out.ok else ("ok" if not v.get("error") else f"error: {v['error']}")
            rows.append({**keys, "seed": out.seed, "variant": name,
                         **{k: v.get(k) for k in ("t50", "t10", "t50_ratio", "t10_ratio", "log_rms")},
                         "mlp_t50": (out.mlp or {}).get("t50"), "mlp_t10": (out.mlp or {}).get("t10"),
                         "t_max": out.t_max, "status": " ".join(status.split()),
                         "run": str(Path("runs") / task.name)})
    return rows


def write_results(out: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """``out/results.csv`` (plain csv module, empty cells for missing values) and, when pyarrow is importable,
    ``out/results.parquet``; both atomic."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    write_text(out / "results.csv", buf.getvalue())
    from featureode.core.provenance import provenance
    from featureode.results.trajectory import write_json

    write_json(out / "results.meta.json", {"columns": list(columns), "rows": len(rows), "provenance": provenance()})
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    table = pa.table({k: _arrow_column(pa, [r.get(k) for r in rows]) for k in columns})
    tmp = out / ".results.parquet.tmp"
    pq.write_table(table, tmp)
    tmp.replace(out / "results.parquet")


def _arrow_column(pa: Any, values: list[Any]) -> Any:
    """A typed pyarrow column: numbers (or nothing) as float64 or int64, anything else as text."""
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int}:
        return pa.array(values, type=pa.int64())
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    return pa.array([None if v is None else str(v) for v in values], type=pa.string())


#: Columns of ``results.csv`` that hold numbers (or nothing).
NUMERIC_COLUMNS = ("seed", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "mlp_t50", "mlp_t10", "t_max")


def read_results(path: "str | Path") -> list[dict[str, Any]]:
    """Rows of a ``results.csv`` with numbers parsed (empty cells → ``None``); the one checked reader (``featureode
    plot`` uses it). A file that is not what a sweep writes — not UTF-8 text, a header without the result columns
    or with columns that are neither those nor config keys, a row with too few or too many cells (a truncated
    file), a non-number in a numeric column — is refused in one line naming the file, the line and the fix (the
    sweep rebuilds ``results.csv`` from its run folders, reusing every finished run)."""
    from featureode.workflow.grid import CONFIG_KEYS

    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    if not path.exists():
        raise SweepError(f"{path} does not exist; run `featureode sweep GRID --out DIR` first")
    fix = "rerun `featureode sweep GRID --out DIR` to rebuild it from the run folders"
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            lines = list(reader)
    except UnicodeDecodeError as exc:
        raise SweepError(f"{path} is not a results table (not UTF-8 text: {exc.reason} at byte {exc.start}); "
                         f"{fix}") from None
    except csv.Error as exc:
        raise SweepError(f"{path} is not a readable CSV table ({exc}); {fix}") from None
    if not header:
        raise SweepError(f"{path} is empty; {fix}")
    missing = [c for c in RESULT_COLUMNS if c not in header]
    unknown = [c for c in header if c not in RESULT_COLUMNS and c not in CONFIG_KEYS]
    if missing or unknown:
        raise SweepError(f"{path} is not a sweep's results table ("
                         + "; ".join(([f"missing columns: {', '.join(missing)}"] if missing else [])
                                     + ([f"unknown columns: {', '.join(map(repr, unknown))}"] if unknown else []))
                         + f"); {fix}")
    rows = []
    for n, cells in enumerate(lines, start=2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise SweepError(f"{path} line {n} has {len(cells)} cells, the header {len(header)} (a truncated or "
                             f"edited file); {fix}")
        row = {}
        for k, v in zip(header, cells):
            if k in ("status", "run", "variant"):
                row[k] = v
                continue
            row[k] = _parse(v)
            if k in NUMERIC_COLUMNS and row[k] is not None and not isinstance(row[k], (int, float)):
                raise SweepError(f"{path} line {n}: column {k!r} holds {v!r:.40}, not a number; {fix}")
        rows.append(row)
    return rows


def load_sweep(out: "str | Path", quantities: "Sequence[str] | None" = ("ratio", "in_support_loss")) -> Any:
    """Every curve of a sweep as one long :class:`pandas.DataFrame`: the varied keys of ``results.csv``, ``seed``,
    ``run`` (its folder under ``out``), then the columns of :meth:`Trajectory.to_pandas
    <featureode.results.trajectory.Trajectory.to_pandas>` (``kind`` ``"ode"`` or ``"mlp"``, ``name`` the variant
    or ``"mlp"``, ``t``, ``quantity``, ``component``, ``value``), read from each run folder's ``ode.json`` and
    ``mlp.json``, and for an ODE-only sweep from its columnar curve file (:func:`read_curves`). ``quantities``: which to keep (default the loss ``L/L(0)`` and the in-support loss; ``None``
    keeps every series, ``f``, ``lambda``, ``r`` … included). A run without result files (failed, or not run yet) is
    left out."""
    import pandas as pd

    from featureode.results.trajectory import ODEResult, Trajectory, TrajectoryFileError

    out = Path(out)
    rows = read_results(out)
    keys = [c for c in (rows[0] if rows else {}) if c not in RESULT_COLUMNS]
    frames = []
    seen: set[str] = set()
    for r in rows:
        if r["run"] in seen:
            continue
        seen.add(r["run"])
        folder = out / r["run"]
        curves = []
        if (folder / "ode.json").exists():
            try:
                curves.append(ODEResult.load(folder).to_pandas())
            except TrajectoryFileError:
                pass
        if (folder / "mlp.json").exists():
            try:
                curves.append(Trajectory.load(folder, "mlp").to_pandas().assign(name="mlp"))
            except TrajectoryFileError:
                pass
        for df in curves:
            if quantities is not None:
                df = df[df["quantity"].isin(list(quantities))]
            head = {k: r[k] for k in keys} | {"seed": r["seed"], "run": r["run"]}
            frames.append(df.assign(**head)[[*head, *df.columns]])
    frames += _columnar_curves(out, rows, keys, quantities)
    if not frames:
        return pd.DataFrame(columns=[*keys, "seed", "run", "kind", "name", "t", "quantity", "component", "value"])
    return pd.concat(frames, ignore_index=True)


def _columnar_curves(out: Path, rows: list[dict[str, Any]], keys: list[str],
                     quantities: "Sequence[str] | None") -> list[Any]:
    """The ODE curves of an ODE-only sweep's one columnar file (:func:`read_curves`) in the long format of
    :func:`load_sweep`: quantities ``loss`` and ``ratio`` (both ``L/L(0)``, as an ODE trajectory stores its loss)
    and ``in_support_loss``, component ``None``."""
    if not ((out / CURVES).exists() or (out / "curves.npz").exists()):
        return []
    curves = read_curves(out)
    head_of = {r["run"]: {k: r[k] for k in keys} | {"seed": r["seed"], "run": r["run"]} for r in rows}
    frames = []
    for (run, variant), df in curves.groupby(["run", "variant"], sort=False):
        if run not in head_of:
            continue
        for quantity, column in (("loss", "loss"), ("ratio", "loss"), ("in_support_loss", "in_support_loss")):
            if quantities is not None and quantity not in quantities:
                continue
            long = df[["t", column]].rename(columns={column: "value"}).assign(
                kind="ode", name=variant, quantity=quantity, component=None)
            head = head_of[run]
            frames.append(long.assign(**head)[[*head, "kind", "name", "t", "quantity", "component", "value"]])
    return frames


def _parse(text: str) -> Any:
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


# ----------------------------------------------------------------------------------------------------------------
# the curves of an ODE-only sweep: one columnar file
# ----------------------------------------------------------------------------------------------------------------
#: The curves of an ODE-only sweep, long format (one row per run, variant and output time): ``DIR/curves.parquet``
#: (``DIR/curves.npz`` where pyarrow is not installed).
CURVES = "curves.parquet"
CURVE_COLUMNS = ("run", "variant", "t", "loss", "in_support_loss")


def _curve_columns(outcomes: Sequence[RunOutcome]) -> dict[str, np.ndarray]:
    runs: list[Any] = []
    variants: list[Any] = []
    cols: dict[str, list[Any]] = {k: [] for k in CURVE_COLUMNS[2:]}
    for o in outcomes:
        for name, c in (o.curves or {}).items():
            n = len(c["t"])
            runs.append(np.full(n, str(Path("runs") / o.name), dtype=object))
            variants.append(np.full(n, name, dtype=object))
            for k in cols:   # a variant that failed before any curve may have no in-support loss
                cols[k].append(np.full(n, np.nan) if c.get(k) is None else np.asarray(c[k], dtype=float))
    if not runs:
        return {k: np.zeros(0, dtype=object if k in ("run", "variant") else float) for k in CURVE_COLUMNS}
    return {"run": np.concatenate(runs), "variant": np.concatenate(variants),
            **{k: np.concatenate(v) for k, v in cols.items()}}


def write_curves(out: Path, outcomes: Sequence[RunOutcome], keep: Sequence[str] = ()) -> Path | None:
    """Write the curves of the ODE-only ``outcomes`` (and, from the file already there, those of the runs named in
    ``keep``, e.g. reused ones) to ``out/curves.parquet`` (``curves.npz`` without pyarrow), atomically. ``None``
    when there is nothing to write."""
    cols = _curve_columns([o for o in outcomes if o.curves])
    if keep:
        try:
            old = read_curves(out)
            old = old[old["run"].isin({str(Path("runs") / k) for k in keep})
                      & ~old["run"].isin(set(cols["run"]))]
            cols = {k: np.concatenate([old[k].to_numpy(dtype=cols[k].dtype), cols[k]]) for k in CURVE_COLUMNS}
        except SweepError:
            pass
    if not len(cols["run"]):
        return None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        buf = io.BytesIO()
        np.savez(buf, **{k: v.astype(str) if v.dtype == object else v for k, v in cols.items()})  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        from featureode.results.trajectory import write_bytes

        write_bytes(out / "curves.npz", buf.getvalue())
        return out / "curves.npz"
    table = pa.table({k: pa.array(v, type=pa.string() if v.dtype == object else pa.float64())
                      for k, v in cols.items()})
    tmp = out / f".{CURVES}.tmp"
    pq.write_table(table, tmp)
    tmp.replace(out / CURVES)
    return out / CURVES


def curve_runs(folder: "str | Path") -> set[str]:
    """The runs (``runs/NAME``) whose curves the ODE-only sweep in ``folder`` holds in its curve file (empty when
    it has none, or it is unreadable: those runs are then computed again)."""
    folder = Path(folder)
    try:
        if (folder / CURVES).exists():
            import pyarrow.parquet as pq

            return set(pq.read_table(folder / CURVES, columns=["run"]).column("run").unique().to_pylist())
        if (folder / "curves.npz").exists():
            with np.load(folder / "curves.npz", allow_pickle=False) as z:
                return set(np.unique(z["run"]).tolist())
    except Exception:  # noqa: BLE001 — a damaged or partial file holds no curve we can trust
        return set()
    return set()


def read_curves(folder: "str | Path") -> Any:
    """The curves of an ODE-only sweep in ``folder`` as a long pandas DataFrame with columns ``run`` (``runs/RUN``,
    as in ``results.csv``), ``variant``, ``t``, ``loss`` (``L/L(0)``) and ``in_support_loss``, one row per output
    time; e.g. ``df[(df.run == "runs/X") & (df.variant == "lazy")]`` is one curve."""
    import pandas as pd

    folder = Path(folder)
    if (folder / CURVES).exists():
        return pd.read_parquet(folder / CURVES)
    if (folder / "curves.npz").exists():
        with np.load(folder / "curves.npz", allow_pickle=False) as z:
            return pd.DataFrame({k: z[k] for k in CURVE_COLUMNS})
    raise SweepError(f"{folder} has no {CURVES}; run `featureode sweep GRID --ode-only --out {folder}` first")


# ----------------------------------------------------------------------------------------------------------------
# summary and acceptance (theory §5)
# ----------------------------------------------------------------------------------------------------------------
def _all(verdicts: Sequence[bool | None]) -> bool | None:
    return False if False in verdicts else True if all(v is True for v in verdicts) else None


def acceptance(richness: float, variants: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """Acceptance verdicts of one run (or of seed means): ``displacement`` with t50 and t10 ratios in the bands of
    :data:`BANDS`; ``lazy`` within 10% on t50 when ``richness ≤ LAZY_RICHNESS``. A ratio bounded but not known still
    decides when the bound lies outside the band; ``None`` where it cannot decide."""
    out: dict[str, bool | None] = {}
    d = variants.get("displacement")
    if d is not None:
        for rule, ((lo50, hi50), (lo10, hi10)) in BANDS.items():
            out[rule] = _all([Ratio.from_entry(d, "t50_ratio").in_band(lo50, hi50),
                              Ratio.from_entry(d, "t10_ratio").in_band(lo10, hi10)])
    lz = variants.get("lazy")
    if lz is not None and richness <= LAZY_RICHNESS:
        out["lazy"] = Ratio.from_entry(lz, "t50_ratio").in_band(0.9, 1.1)
    return out


def mean_sd(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (``None`` for one value) and count of the non-missing values."""
    got = [x for x in xs if x is not None]
    if not got:
        return None, None, 0
    return float(np.mean(got)), (float(np.std(got, ddof=1)) if len(got) > 1 else None), len(got)


def aggregate(richness: float, outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """One point over its finished seeds: per variant the mean, sd and count of each metric (the t50/t10 ratios and
    log-RMS, or t50/t10 for ODE-only runs), the verdicts of each seed and of the seed means. Where some seed has only
    a bound on a ratio, the seed mean has one too (the mean of the seeds' ranges, ``range``)."""
    with_mlp = any(o.mlp is not None for o in outcomes)
    keys = ("t50_ratio", "t10_ratio", "log_rms") if with_mlp else ("t50", "t10")
    variants = sorted({v for o in outcomes for v in o.variants})
    out: dict[str, Any] = {"seeds": [o.seed for o in outcomes],
                           "mlp": {k: mean_sd([(o.mlp or {}).get(k) for o in outcomes])[0] for k in ("t50", "t10")},
                           "variants": {}, "keys": list(keys),
                           "accepted_per_seed": [acceptance(richness, o.variants) for o in outcomes] if with_mlp
                           else []}
    means: dict[str, dict[str, Any]] = {}
    for v in variants:
        stats = {}
        for key in keys:
            vals = [o.variants[v].get(key) if v in o.variants else None for o in outcomes]
            m, sd, n = mean_sd(vals)
            stats[key] = {"mean": m, "sd": sd, "n": n, "values": vals}
        means[v] = {}
        for key in keys[:2] if with_mlp else ():
            ranges = [Ratio.from_entry(o.variants[v], key) if v in o.variants else Ratio.unknown()
                      for o in outcomes]
            mean = Ratio.unknown() if any(r.is_unknown for r in ranges) else Ratio(
                float(np.mean([r.lo for r in ranges])), float(np.mean([r.hi for r in ranges])))
            stats[key]["range"] = mean.to_json()
            means[v][f"{key}_range"] = stats[key]["range"]
        out["variants"][v] = stats
    out["accepted"] = acceptance(richness, means) if with_mlp else {}
    return out


def summary_markdown(title: str, description: str, seeds: Sequence[int], rows: Sequence[tuple[str, dict]],
                     basis: str = "target") -> str:
    """The summary table: per point the seed-mean ratios (± sd over seeds) per variant and the acceptance verdicts
    (ODE-only sweeps: the ODE's t50/t10)."""
    variants = sorted({v for _, a in rows for v in a["variants"]})
    with_mlp = any(a["keys"][0] == "t50_ratio" for _, a in rows)
    f = lambda x: "—" if x is None else f"{x:.3g}"  # noqa: E731

    def cell(st: dict) -> str:
        if st["n"] == len(st["values"]):
            return f(st["mean"]) + (f" ± {st['sd']:.2g}" if st["sd"] is not None else "")
        if st.get("range") is not None:
            return Ratio.from_json(st["range"]).text()
        return "—" if st["n"] == 0 else f"{f(st['mean'])} ({st['n']}/{len(st['values'])} seeds)"

    k50, k10 = ("t50_ratio", "t10_ratio") if with_mlp else ("t50", "t10")
    what = "t50 / t10 ratio" if with_mlp else "t50 / t10"
    if with_mlp:
        head = "| case | MLP t50 | MLP t10 | " + " | ".join(f"{v} {what}" for v in variants) + " | accepted |"
        intro = (f"Ratios are ODE/MLP on the test loss, mean ± standard deviation over seeds {list(seeds)} (network "
                 "initialisation and SGD samples); no constant is fitted. `< x` / `> x`: a bound on the seed mean, "
                 "where some seed's curve (MLP or ODE) ends before it crosses. A verdict is on the seed-mean ratios; "
                 "`k/n seeds` counts the seeds whose own ratios are inside the band.")
        ncol = len(variants) + 4
    else:
        head = "| case | " + " | ".join(f"{v} {what}" for v in variants) + " |"
        intro = (f"ODE only (no network trained): crossing times of L/L(0) = 0.5 and 0.1, mean ± standard deviation "
                 f"over seeds {list(seeds)}.")
        ncol = len(variants) + 1
    lines = [f"# {title}, ODE on the {basis} basis", ""] + ([description, ""] if description else []) + [
        intro, "", head, "|" + "---|" * ncol]
    for name, a in rows:
        cells = [f"{cell(a['variants'][v][k50])} / {cell(a['variants'][v][k10])}" if v in a["variants"] else "—"
                 for v in variants]
        if not a["seeds"]:
            cells = ["failed"] * len(variants)
        if not with_mlp:
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            continue
        verdicts = []
        for k, ok in a["accepted"].items():
            per_seed = sum(1 for acc in a["accepted_per_seed"] if acc.get(k))
            verdicts.append(f"{k}: {'yes' if ok else 'no' if ok is not None else 'n/a'} "
                            f"({per_seed}/{len(a['accepted_per_seed'])} seeds)")
        lines.append(f"| {name} | {f(a['mlp']['t50'])} | {f(a['mlp']['t10'])} | " + " | ".join(cells)
                     + f" | {', '.join(verdicts)} |")
    if with_mlp:
        bands = {rule: f"t50 ratio in [{a}, {b}] and t10 ratio in [{c}, {e}]"
                 for rule, ((a, b), (c, e)) in BANDS.items()}
        bands["lazy"] = f"t50 ratio within 10% on the lazy cases (γ ≤ {LAZY_RICHNESS})"
        for rule, text in bands.items():
            got = [a["accepted"][rule] for _, a in rows if rule in a["accepted"]]
            runs = [acc[rule] for _, a in rows for acc in a["accepted_per_seed"] if rule in acc]
            if got:
                lines.append(f"\n**{rule}** ({text}): {sum(1 for x in got if x)}/{len(got)} cases on the seed mean"
                             + (f" ({sum(1 for x in got if x is None)} undecided: a curve ends before it crosses)"
                                if None in got else "")
                             + f"; {sum(1 for x in runs if x)}/{len(runs)} single runs")
    return "\n".join(lines) + "\n"




