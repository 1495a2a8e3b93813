"""ODE vs MLP on one config (DESIGN §5–6): :func:`compare_config` solves every ODE variant, simulates the MLP (or
reuses a finished simulation in the folder) and writes the report.

The jobs live in their own modules: the curve metrics and the :class:`~featureode.metrics.Ratio` of two crossing
times in :mod:`featureode.metrics`, run folders (stamp, lock, cached results) in :mod:`featureode.runs`, the
:class:`~featureode.report.Report` and its ``report.json``/``report.md``/``report.png`` in :mod:`featureode.report`.
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

from . import runs
from .config import SECTIONS, Config, config_from_dict
from .metrics import Ratio
from .report import Report, build_report, figure_variants
from .trajectory import ODEResult


def compare_config(cfg: Config, out: "str | Path", progress: bool = True,
                   figure_variant: "str | Sequence[str] | None" = None) -> Report:
    """Solve every ODE variant of ``cfg`` into ``out/ode.json``, simulate the MLP into ``out/mlp.json`` (or reuse a
    finished simulation of the same config there), and write ``out/report.json``, ``report.md``, ``report.png``.
    ``figure_variant``: the ODE variant(s) of the figure's mode and eigenvalue panels (default ``displacement``).
    The folder is locked while it runs (:func:`featureode.runs.locked`). Returns the :class:`Report`."""
    from .solve import SolveError, solve_config
    from .variants import variants_from_config

    figure_variants([v.label for v in variants_from_config(cfg.ode)], figure_variant)  # checked before the work
    out = Path(out)
    with runs.locked(out):
        t0 = time.time()
        try:
            solve_config(cfg, out)
        except SolveError:  # ode.json is written first and keeps each failed variant with its error
            pass
        ode = ODEResult.load(out)
        mlp = runs.mlp_trajectory(cfg, out, progress=progress)
        report = build_report(cfg, ode, mlp, wall_s=time.time() - t0)
        report.write(out, variant=figure_variant)
    return report


# ----------------------------------------------------------------------------------------------------------------
# shims of the helpers that the validation-suites section below was written against — removed at merge, together
# with that section (the suites move to their own module)
# ----------------------------------------------------------------------------------------------------------------
def guard_output_dir(out: Path, cfg: Config, force: bool = False) -> None:  # removed at merge
    runs.prepare(out, cfg, force=force)
    runs.release(out)


def _cached(path: Path, cfg: Config, sections: tuple[str, ...]) -> dict | None:  # removed at merge
    return runs.cached_report(Path(path).parent, cfg)


def ratio_bounds(v: dict, key: str) -> tuple[float, float] | None:  # removed at merge
    r = Ratio.from_entry(v, key)
    return None if r.is_unknown else (r.lo, r.hi)


def _as_range(r: Sequence[float | None] | None) -> tuple[float, float] | None:  # removed at merge
    return None if r is None else (Ratio.from_json(r).lo, Ratio.from_json(r).hi)


def stored_range(rng: tuple[float, float] | None) -> list[float | None] | None:  # removed at merge
    return None if rng is None else [rng[0], rng[1] if math.isfinite(rng[1]) else None]


def ratio_text(rng: tuple[float, float] | None, digits: int = 3) -> str:  # removed at merge
    return "—" if rng is None else Ratio(*rng).text(digits)


def json_default(o: Any) -> Any:  # removed at merge (cli._print_json: use featureode.trajectory.json_ready)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"cannot serialise {type(o).__name__}")


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
