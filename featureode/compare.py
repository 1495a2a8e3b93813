"""ODE vs MLP comparison (DESIGN §5–6): metrics, ``report.json``/``report.md``/``report.png``, validation suites.

Metrics for each ODE variant against the MLP on the same config (no constant is fitted):

* ``t50``, ``t10``: first time the normalised loss ``L(t)/L(0)`` falls below 0.5 / 0.1 (log-linear interpolation);
* ``t50_ratio``, ``t10_ratio``: ODE / MLP;
* ``log_rms``: RMS of ``log L_ode − log L_mlp`` on the MLP's (log-spaced) measurement times where the MLP loss is
  above 1e-2 (ODE interpolated log-linearly in t).

Both the MLP test loss and its in-support loss ``Σ_β (v_β − f_β)² / Σ v_β²`` (projections on the target's modes)
are compared; the ODE's loss on the target basis is an in-support loss by construction.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .config import MLP_SECTIONS, SECTIONS, Config, config_from_dict
from .metrics import crossing_time, in_support_loss, ratio_range


# ----------------------------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------------------------
def interp_log(t_new: np.ndarray, t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y(t_new)`` interpolating ``log y`` linearly in ``t`` (``y > 0``); NaN outside ``[t_0, t_end]``."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    out = np.exp(np.interp(t_new, t, np.log(np.maximum(y, 1e-300))))
    out[(t_new < t[0]) | (t_new > t[-1])] = np.nan
    return out


def normalised(loss: Sequence[float]) -> np.ndarray:
    """``L(t)/L(0)`` (the first sample is ``t = 0``)."""
    arr = np.asarray(loss, float)
    if arr.size == 0 or not arr[0] > 0:
        raise ValueError(f"a loss curve must start with a positive L(0), got {arr[:1]}")
    return arr / arr[0]


def curve_metrics(t_ode: Sequence[float], loss_ode: Sequence[float], t_ref: Sequence[float],
                  loss_ref: Sequence[float], floor: float = 1e-2) -> dict[str, Any]:
    """Metrics of DESIGN §5 for one ODE curve against one reference (MLP) curve, both as ``L/L(0)``.

    ``t50``/``t10``: the ODE's crossing times; ``t50_ratio``/``t10_ratio``: ODE/MLP, ``None`` unless both curves
    cross; ``t50_ratio_range``/``t10_ratio_range``: ``[lo, hi]`` from :func:`~featureode.metrics.ratio_range`, so a
    curve that ends before crossing still bounds the ratio (``hi = None`` for no upper bound; ``None`` when neither
    crosses)."""
    t_o, l_o = np.asarray(t_ode, float), normalised(loss_ode)
    t_r, l_r = np.asarray(t_ref, float), normalised(loss_ref)
    out: dict[str, Any] = {}
    for key, level in (("t50", 0.5), ("t10", 0.1)):
        a, b = crossing_time(t_o, l_o, level), crossing_time(t_r, l_r, level)
        out[key] = a
        out[f"{key}_ratio"] = None if a is None or b is None or b == 0 else a / b
        rng = ratio_range(a, float(t_o[-1]), b, float(t_r[-1]))
        out[f"{key}_ratio_range"] = stored_range(rng)
    mask = (l_r > floor) & (t_r > 0) & (t_r <= t_o[-1])
    if mask.any():
        diff = np.log(interp_log(t_r[mask], t_o, l_o)) - np.log(l_r[mask])
        out["log_rms"] = float(np.sqrt(np.nanmean(diff**2)))
    else:
        out["log_rms"] = None
    return out


def ratio_bounds(v: dict, key: str) -> tuple[float, float] | None:
    """Where a variant's ratio ``key`` (``"t50_ratio"``, ``"t10_ratio"``) lies: its ``key + "_range"`` entry (upper
    end ``None`` = ∞) if it has one, else the exact value, else ``None``."""
    if f"{key}_range" in v:
        return _as_range(v[f"{key}_range"])
    x = v.get(key)
    return None if x is None else (float(x), float(x))


def _as_range(r: Sequence[float | None] | None) -> tuple[float, float] | None:
    """A stored ``[lo, hi]`` (``hi = None``: ∞) as a tuple; the inverse of :func:`stored_range`."""
    return None if r is None else (float(r[0]), math.inf if r[1] is None else float(r[1]))


def stored_range(rng: tuple[float, float] | None) -> list[float | None] | None:
    """A ratio range ``(lo, hi)`` as JSON can hold it: ``[lo, hi]`` with ``hi = None`` for ∞."""
    return None if rng is None else [rng[0], rng[1] if math.isfinite(rng[1]) else None]


def ratio_text(rng: tuple[float, float] | None, digits: int = 3) -> str:
    """A ratio range as text: the value, ``< hi``, ``> lo``, ``[lo, hi]``, or ``—``."""
    if rng is None:
        return "—"
    lo, hi = rng
    if lo == hi:
        return f"{lo:.{digits}g}"
    if lo == 0:
        return f"< {hi:.{digits}g}"
    if math.isinf(hi):
        return f"> {lo:.{digits}g}"
    return f"[{lo:.{digits}g}, {hi:.{digits}g}]"


# ----------------------------------------------------------------------------------------------------------------
# output folders and caching
# ----------------------------------------------------------------------------------------------------------------
def guard_output_dir(out: Path, cfg: Config, force: bool = False) -> None:
    """Create ``out`` and stamp it with the config; refuse a folder stamped with a different config.

    ``out/config.json`` records the config and its digest. A folder holding results of another config is refused
    unless ``force`` (then its stamp is replaced and stale results are overwritten as they are recomputed).
    """
    out = Path(out)
    stamp = out / "config.json"
    if stamp.exists() and not force:
        old = json.loads(stamp.read_text())
        if old.get("digest") != cfg.digest():
            changed = sorted(f"[{sec}] {k}" for sec, vals in cfg.to_dict().items()
                             for k, v in vals.items() if old.get("config", {}).get(sec, {}).get(k) != v)
            raise FileExistsError(f"{out} holds results of a different config (changed: {', '.join(changed)}); "
                                  "choose another --out or pass --force")
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"digest": cfg.digest(), "config": cfg.to_dict(), "source": cfg.source},
                                indent=2, default=str))


def _cached(path: Path, cfg: Config, sections: tuple[str, ...]) -> dict | None:
    """A result file written for the same config sections, or ``None``."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return data if data.get("digest") == cfg.digest(sections) else None


def run_mlp(cfg: Config, out: Path, progress: bool = True) -> dict:
    """Simulate the MLP of ``cfg`` into ``out`` or reuse ``out/mlp.json`` from the same config."""
    from .mlp import simulate_config

    cached = _cached(out / "mlp.json", cfg, MLP_SECTIONS)
    if cached is not None and cached.get("complete", True):
        return cached
    # simulate_config writes out/mlp.json, stamped with the digest of the MLP's config sections
    return simulate_config(cfg, out, resume=(out / "checkpoint.pt").exists(), progress=progress)


def json_default(o: Any) -> Any:
    """``json.dumps`` fallback: NumPy arrays and scalars as lists and numbers; anything else is an error."""
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"cannot serialise {type(o).__name__}")


# ----------------------------------------------------------------------------------------------------------------
# the comparison
# ----------------------------------------------------------------------------------------------------------------
def build_report(cfg: Config, ode: dict, mlp: dict) -> dict:
    """``report.json`` content (DESIGN §6) from the ODE and MLP results of one config."""
    t_m = np.asarray(mlp["t"], float)
    test = normalised(mlp["loss"])
    insup = np.asarray(mlp["in_support_loss"], float)
    mlp_rep = {"t": t_m.tolist(), "loss": test.tolist(), "in_support_loss": insup.tolist(),
               "t50": crossing_time(t_m, test, 0.5), "t10": crossing_time(t_m, test, 0.1),
               "in_support_t50": crossing_time(t_m, insup / insup[0], 0.5),
               "in_support_t10": crossing_time(t_m, insup / insup[0], 0.1),
               "complete": mlp.get("complete", True), "reached_t": mlp.get("reached_t", float(t_m[-1]))}
    variants: dict[str, dict] = {}
    for name, v in ode["variants"].items():
        if len(v.get("t", [])) < 2:
            variants[name] = {"t": [], "loss": [], "t50": None, "t10": None, "t50_ratio": None, "t10_ratio": None,
                              "log_rms": None, "in_support": {}, "error": v.get("error", "no solution")}
            continue
        met = curve_metrics(v["t"], v["loss"], t_m, test)
        # the ODE's loss on the target's modes only (on an extended basis the other modes are left out, as in the
        # MLP's in-support loss)
        ins = curve_metrics(v["t"], in_support_loss(v["f"], ode["target"]), t_m, insup)
        variants[name] = {"t": list(v["t"]), "loss": normalised(v["loss"]).tolist(), **met,
                          "in_support": {k: ins[k] for k in ("t50_ratio", "t10_ratio", "log_rms", "t50_ratio_range",
                                                             "t10_ratio_range")}}
        if v.get("error"):
            variants[name]["error"] = v["error"]
    return {"config": cfg.to_dict(), "modes": ode["modes"], "mlp": mlp_rep, "variants": variants}


def report_markdown(cfg: Config, report: dict) -> str:
    """The metrics table of ``report.md``."""
    m = report["mlp"]
    f = lambda x, p=3: "—" if x is None else f"{x:.{p}g}"  # noqa: E731
    lines = [f"# featureode compare: `{cfg.target.expr}`, d = {cfg.data.dim}, γ = {cfg.network.richness}, "
             f"{cfg.network.activation}, N = {cfg.network.width}",
             "",
             f"MLP (test loss): t50 = {f(m['t50'], 4)}, t10 = {f(m['t10'], 4)}; in-support loss: "
             f"t50 = {f(m['in_support_t50'], 4)}, t10 = {f(m['in_support_t10'], 4)}"
             + ("" if m["complete"] else f" — **MLP stopped early at t = {m['reached_t']:.4g}**"),
             "",
             "No constant below is fitted: every ODE constant is derived from the network's parametrisation.",
             "",
             "| variant | t50 | t10 | t50 ratio | t10 ratio | log-RMS | t50 ratio (in-support) | "
             "t10 ratio (in-support) | log-RMS (in-support) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, v in report["variants"].items():
        s = {k: None for k in ("t50_ratio", "t10_ratio", "log_rms")} | v["in_support"]
        r50, r10, i50, i10 = (ratio_text(ratio_bounds(x, k)) for x in (v, s) for k in ("t50_ratio", "t10_ratio"))
        lines.append(f"| {name} | {f(v['t50'], 4)} | {f(v['t10'], 4)} | {r50} | {r10} | "
                     f"{f(v['log_rms'])} | {i50} | {i10} | {f(s['log_rms'])} |")
    lines += [f"\n**{name} failed**: {v['error']}" for name, v in report["variants"].items() if v.get("error")]
    lines += ["", "Ratios are ODE/MLP (`< x`, `> x`: a bound, where one curve ends before it crosses); log-RMS is the "
              "RMS of log L_ode − log L_mlp where the MLP loss exceeds 1e-2.",
              "![report](report.png)", ""]
    return "\n".join(lines)


def report_figure(path: Path, cfg: Config, ode: dict, mlp: dict, report: dict) -> None:
    """Three panels on shared log-time axes: loss, mode coefficients ``f_β(t)``, eigenvalues ``λ_β(t)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), sharex=True)
    t_m = np.asarray(mlp["t"], float)
    pos = t_m > 0
    ax = axes[0]
    ax.plot(t_m[pos], np.asarray(report["mlp"]["loss"])[pos], "k-", lw=2.2, label="MLP test loss")
    ax.plot(t_m[pos], np.asarray(report["mlp"]["in_support_loss"])[pos], "k--", lw=1.5, label="MLP in-support")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, (name, v) in zip(colors, report["variants"].items()):
        if not v["t"]:
            continue
        t = np.asarray(v["t"], float)
        ax.plot(t[t > 0], np.asarray(v["loss"])[t > 0], color=c, label=f"ODE {name}")
    ax.set(xscale="log", yscale="log", xlabel="t", ylabel="L(t)/L(0)", title="loss")
    ax.set_ylim(bottom=max(1e-4, ax.get_ylim()[0]))
    ax.legend(fontsize=8)

    mlp_modes, ode_modes = list(mlp["modes"]), list(ode["modes"])
    shown = [m for m in mlp_modes if m in ode_modes][:6]
    key = "displacement" if "displacement" in ode["variants"] else next(iter(ode["variants"]))
    shown_variant = ode["variants"][key]
    for ax, field, title in ((axes[1], "f", "mode coefficients f_β(t)"), (axes[2], "lambda", "eigenvalues λ_β(t)")):
        for c, mode in zip(colors, shown):
            i, j = mlp_modes.index(mode), ode_modes.index(mode)
            y = np.asarray(mlp[field], float)[:, i]
            ax.plot(t_m[pos], y[pos], "o", ms=3, color=c, label=f"MLP {mode}")
            if field == "f" and "f_stderr" in mlp:
                e = np.asarray(mlp["f_stderr"], float)[:, i]
                ax.fill_between(t_m[pos], (y - 2 * e)[pos], (y + 2 * e)[pos], color=c, alpha=0.2, lw=0)
            if field not in shown_variant:
                continue
            t = np.asarray(shown_variant["t"], float)
            ax.plot(t[t > 0], np.asarray(shown_variant[field], float)[t > 0, j], "-", color=c, label=f"ODE {key} {mode}")
        ax.set(xscale="log", xlabel="t", title=title)
        if field == "lambda":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle(f"{cfg.target.expr}, d = {cfg.data.dim}, γ = {cfg.network.richness}, {cfg.network.activation}, "
                 f"N = {cfg.network.width} (bands: ±2 s.e.)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_config(cfg: Config, out: "str | Path", progress: bool = True) -> dict:
    """Solve every ODE variant, simulate (or reuse) the MLP, and write ``report.json``, ``report.md``, ``report.png``."""
    from .solve import solve_config

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    ode = solve_config(cfg, out).to_json()  # a variant that failed keeps its partial curve and an "error" key
    mlp = run_mlp(cfg, out, progress=progress)
    report = build_report(cfg, ode, mlp)
    report.update(digest=cfg.digest(tuple(SECTIONS)), wall_s=time.time() - t0)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=json_default))
    (out / "report.md").write_text(report_markdown(cfg, report))
    report_figure(out / "report.png", cfg, ode, mlp, report)
    return report


# ----------------------------------------------------------------------------------------------------------------
# validation suites
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One cell of a validation grid: a name, the config keys that differ from the suite's base, and the seed."""

    name: str
    overrides: dict
    seed: int = 0

    @property
    def run_name(self) -> str:
        """Folder name of this seed's run (seed 0 keeps the plain case name)."""
        return self.name if self.seed == 0 else f"{self.name}_s{self.seed}"

    @property
    def richness(self) -> float:
        """The case's γ (0.5 when the case does not override it)."""
        return float(self.overrides.get("network", {}).get("richness", 0.5))


LAZY_RICHNESS = 0.01  # cases with γ at or below this are "lazy" for the acceptance rule of DESIGN §5


def _grid(targets: Sequence[str], gammas: Sequence[float], sweep: dict[str, Sequence[int]],
          base_dim: int) -> list[Case]:
    cases = []
    for tgt in targets:
        for g in gammas:
            cases.append(Case(f"{_slug(tgt)}_d{base_dim}_g{g:g}",
                              {"target": {"expr": tgt}, "network": {"richness": g}, "data": {"dim": base_dim}}))
    for tgt, ds in sweep.items():
        for d in ds:
            for g in gammas:
                cases.append(Case(f"{_slug(tgt)}_d{d}_g{g:g}",
                                  {"target": {"expr": tgt}, "network": {"richness": g}, "data": {"dim": d}}))
    return cases


def _slug(expr: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in expr).strip("_").replace("__", "_")


SUITES: dict[str, dict[str, Any]] = {
    "standard": {
        "description": "targets {z0, h2(z0), z0*z1, staircase(2), staircase(3)} × γ ∈ {0.005, 0.15, 0.5} at d = 16, "
                       "plus z0*z1 at d ∈ {8, 32}; exponent 1.5, offset 3, relu, σ_b = 0.5, N = 1024, B = 2048",
        "base": {"data": {"exponent": 1.5, "offset": 3.0},
                 "network": {"activation": "relu", "width": 1024, "bias_std": 0.5},
                 "training": {"batch": 2048, "seed": 0, "stop_loss": 0.005, "threads": 1},
                 "ode": {"variants": ["lazy", "agop", "displacement"]}},
        "cases": _grid(["z0", "h2(z0)", "z0*z1", "staircase(2)", "staircase(3)"], [0.005, 0.15, 0.5],
                       {"z0*z1": [8, 32]}, 16),
        "t_max_factor": 2.0, "t_max_cap": 20000.0, "seeds": (0, 1, 2),
    },
    "quick": {
        "description": "smoke suite: z0 and z0*z1 at d = 8, γ ∈ {0.005, 0.5}, N = 256 (minutes on 2 cores)",
        "base": {"data": {"exponent": 1.5, "offset": 3.0},
                 "network": {"activation": "relu", "width": 256, "bias_std": 0.5},
                 "training": {"batch": 512, "seed": 0, "n_test": 4000, "n_points": 30, "stop_loss": 0.005,
                              "threads": 1},
                 "ode": {"variants": ["lazy", "displacement"]}},
        "cases": _grid(["z0", "z0*z1"], [0.005, 0.5], {}, 8),
        "t_max_factor": 1.5, "t_max_cap": 2000.0,
    },
}


def lazy_t10(theory: Any) -> float:
    """``t10`` of the lazy kernel flow with exact ``λ(0)`` of a :class:`~featureode.kernel.KernelTheory`: solves
    ``Σ v² e^{−2λt} = 0.1 Σ v²`` by bisection."""
    v2, lam = np.asarray(theory.target, float) ** 2, np.asarray(theory.lambda_exact, float)
    ratio = lambda t: float(np.sum(v2 * np.exp(-2 * lam * t)) / np.sum(v2))  # noqa: E731
    lo, hi = 0.0, 1.0
    while not ratio(hi) <= 0.1:
        if hi > 1e30:
            raise ValueError(f"the lazy kernel flow never reaches L/L(0) = 0.1 (λ_β(0) = {lam.tolist()}); a target "
                             "mode with zero or non-finite initial eigenvalue cannot be learnt by the kernel flow")
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) > 0.1 else (lo, mid)
    return hi


def suite_config(suite: str, case: Case, basis: str = "target") -> Config:
    """The full config of one case: the suite's base, the case's overrides, and the horizon ``t_max``.

    ``t_max = min(cap, factor × t10_lazy, 4 × t10_displacement)``. The lazy kernel flow with exact ``λ(0)`` bounds
    the learning time from above in the rich regime; the second bound keeps rich runs, whose kernel (and so the
    number of SGD steps per unit time) grows by 10–100×, from spending most of their steps after the target is
    learnt. It is a choice of horizon only: no constant of the ODE depends on it, and an MLP slower than 4× the
    prediction shows up as a missing ``t10`` (a failed case), not as a shorter curve. Both bounds use the target
    basis, so the MLP runs (and their cache) are the same whatever ODE ``basis`` the suite is compared on.
    """
    from .kernel import kernel_theory
    from .solve import solve_variant

    spec = SUITES[suite]
    raw: dict[str, dict] = {k: dict(v) for k, v in spec["base"].items()}
    for sec, vals in case.overrides.items():
        raw.setdefault(sec, {}).update(vals)
    raw.setdefault("training", {})["seed"] = case.seed
    raw.setdefault("ode", {})["basis"] = basis
    cfg = config_from_dict(raw, source=f"suite:{suite}/{case.run_name}")
    theory = kernel_theory(cfg, basis="target")
    t_max = min(spec["t_max_cap"], spec["t_max_factor"] * lazy_t10(theory))
    t10 = solve_variant(theory, "displacement", t_max).t10
    if t10 is not None:
        t_max = min(t_max, 4 * t10)
    return cfg.replace(training={"t_max": float(f"{t_max:.4g}")})


def _run_case(suite: str, case: Case, out: str, force: bool, basis: str) -> dict:
    cfg = suite_config(suite, case, basis)
    case_dir = Path(out) / case.run_name
    cached = _cached(case_dir / "report.json", cfg, tuple(SECTIONS))
    if cached is not None and not force:
        return cached
    guard_output_dir(case_dir, cfg, force=force)
    return compare_config(cfg, case_dir, progress=False)


#: Acceptance bands (ODE/MLP ratios of t50 and t10): issue 6's, and the tighter ones a first prototype reached
#: (DESIGN §5), reported side by side.
BANDS = {"displacement": ((0.85, 1.25), (0.75, 1.30)), "displacement_prototype": ((0.93, 1.20), (0.75, 1.25))}


def _in_band(rng: tuple[float, float] | None, lo: float, hi: float) -> bool | None:
    """Is a ratio known to lie in ``[lo, hi]`` (``True``), known to lie outside (``False``), or not known (``None``)?"""
    if rng is None:
        return None
    a, b = rng
    if a == b:
        return lo <= a <= hi
    if lo <= a and b <= hi:
        return True
    return False if b <= lo or a >= hi else None


def _all(verdicts: Sequence[bool | None]) -> bool | None:
    """``False`` if any verdict is ``False``, ``True`` if all are ``True``, else ``None``."""
    return False if False in verdicts else True if all(v is True for v in verdicts) else None


def acceptance(case: Case, report: dict) -> dict[str, bool | None]:
    """Acceptance verdicts of one case: ``displacement`` with t50 and t10 ratios in the bands of :data:`BANDS`
    (issue 6, and the prototype's DESIGN §5 figures as ``displacement_prototype``) on every case; ``lazy`` within 10%
    on t50 for the lazy cases (γ ≤ ``LAZY_RICHNESS``). A ratio bounded but not known (one curve ends before it
    crosses) still decides when the bound lies outside the band; ``None`` where it cannot decide."""
    out: dict[str, bool | None] = {}
    d = report["variants"].get("displacement")
    if d is not None:
        for rule, ((lo50, hi50), (lo10, hi10)) in BANDS.items():
            out[rule] = _all([_in_band(ratio_bounds(d, "t50_ratio"), lo50, hi50),
                              _in_band(ratio_bounds(d, "t10_ratio"), lo10, hi10)])
    lz = report["variants"].get("lazy")
    if lz is not None and case.richness <= LAZY_RICHNESS:
        out["lazy"] = _in_band(ratio_bounds(lz, "t50_ratio"), 0.9, 1.1)
    return out


def _mean_sd(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (``None`` for one value) and count of the non-missing values."""
    got = [x for x in xs if x is not None]
    if not got:
        return None, None, 0
    return float(np.mean(got)), (float(np.std(got, ddof=1)) if len(got) > 1 else None), len(got)


def aggregate(case: Case, reports: Sequence[dict]) -> dict:
    """One case over its seeds: per variant the mean, standard deviation and count of the t50/t10 ratios, the
    acceptance verdicts of each seed, and the verdicts of the seed-mean ratios. Where some seed has only a bound on a
    ratio, the seed mean has one too (the mean of the seeds' ranges, ``range``), and the verdict uses it."""
    variants = sorted({v for r in reports for v in r["variants"]})
    out: dict[str, Any] = {"seeds": [r["config"]["training"]["seed"] for r in reports],
                           "mlp": {k: _mean_sd([r["mlp"][k] for r in reports])[0] for k in ("t50", "t10")},
                           "variants": {}, "accepted_per_seed": [acceptance(case, r) for r in reports]}
    mean_report: dict[str, Any] = {"variants": {}}
    for v in variants:
        stats = {}
        for key in ("t50_ratio", "t10_ratio", "log_rms"):
            vals = [r["variants"][v][key] if v in r["variants"] else None for r in reports]
            m, sd, n = _mean_sd(vals)
            stats[key] = {"mean": m, "sd": sd, "n": n, "values": vals}
        mean_report["variants"][v] = {}
        for key in ("t50_ratio", "t10_ratio"):
            ranges = [ratio_bounds(r["variants"][v], key) if v in r["variants"] else None for r in reports]
            mean = None if None in ranges else (float(np.mean([a for a, _ in ranges])),
                                                float(np.mean([b for _, b in ranges])))
            stats[key]["range"] = stored_range(mean)
            mean_report["variants"][v][f"{key}_range"] = stats[key]["range"]
        out["variants"][v] = stats
    out["accepted"] = acceptance(case, mean_report)
    return out


def summary_markdown(suite: str, rows: list[tuple[Case, dict]], basis: str = "target") -> str:
    """Summary table of a suite: seed-mean ratios (± sd over seeds) per variant and the acceptance verdicts."""
    variants = sorted({v for _, a in rows for v in a["variants"]})
    f = lambda x: "—" if x is None else f"{x:.3g}"  # noqa: E731

    seeds = SUITES[suite].get("seeds", (0,))

    def cell(st: dict) -> str:
        if st["n"] == len(st["values"]):
            return f(st["mean"]) + (f" ± {st['sd']:.2g}" if st["sd"] is not None else "")
        if st.get("range") is not None:
            return ratio_text(_as_range(st["range"]))
        return "—" if st["n"] == 0 else f"{f(st['mean'])} ({st['n']}/{len(st['values'])} seeds)"

    head = "| case | MLP t50 | MLP t10 | " + " | ".join(f"{v} t50 / t10 ratio" for v in variants) + " | accepted |"
    lines = [f"# validation suite `{suite}`, ODE on the {basis} basis", "", SUITES[suite]["description"], "",
             f"Ratios are ODE/MLP on the test loss, mean ± standard deviation over seeds {list(seeds)} (network "
             "initialisation and SGD samples); no constant is fitted. `< x` / `> x`: a bound on the seed mean, where "
             "some seed's curve (MLP or ODE) ends before it crosses. A verdict is on the seed-mean ratios; "
             "`k/n seeds` counts the seeds whose own ratios are inside the band.", "", head,
             "|" + "---|" * (len(variants) + 4)]
    for case, a in rows:
        cells = [f"{cell(a['variants'][v]['t50_ratio'])} / {cell(a['variants'][v]['t10_ratio'])}"
                 if v in a["variants"] else "—" for v in variants]
        verdicts = []
        for k, ok in a["accepted"].items():
            per_seed = sum(1 for acc in a["accepted_per_seed"] if acc.get(k))
            verdicts.append(f"{k}: {'yes' if ok else 'no' if ok is not None else 'n/a'} "
                            f"({per_seed}/{len(a['accepted_per_seed'])} seeds)")
        lines.append(f"| {case.name} | {f(a['mlp']['t50'])} | {f(a['mlp']['t10'])} | " + " | ".join(cells)
                     + f" | {', '.join(verdicts)} |")
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


def run_suite(suite: str, out: "str | Path", jobs: int = 1, progress: bool = True, force: bool = False,
              basis: str = "target") -> list:
    """Run a named suite into ``out/<case>[_s<seed>]/`` for each of its seeds, the ODE on ``basis``; finished runs
    are reused, so an interrupted suite resumes. Writes ``summary.json`` (per case: seed statistics and verdicts)
    and ``summary.md``. Rerunning a folder with another ``basis`` needs ``force`` and reuses the MLP runs."""
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cases = SUITES[suite]["cases"]
    runs = [dataclasses.replace(c, seed=s) for c in cases for s in SUITES[suite].get("seeds", (0,))]
    results: dict[str, dict] = {}
    bar = tqdm(total=len(runs), desc=f"suite {suite}", disable=not progress)
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futs = {pool.submit(_run_case, suite, c, str(out), force, basis): c for c in runs}
            for fut in futs:
                results[futs[fut].run_name] = fut.result()
                bar.update()
    else:
        for c in runs:
            bar.set_postfix_str(c.run_name)
            results[c.run_name] = _run_case(suite, c, str(out), force, basis)
            bar.update()
    bar.close()
    rows = [(c, aggregate(c, [results[r.run_name] for r in runs if r.name == c.name])) for c in cases]
    (out / "summary.json").write_text(json.dumps({c.name: a for c, a in rows}, indent=1, default=json_default))
    (out / "summary.md").write_text(summary_markdown(suite, rows, basis))
    return rows
