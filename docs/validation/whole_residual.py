"""The mean-field flow driven by the whole residual on T (``meanfield+whole``), scored against the stored MLP runs.

``meanfield+tail`` drives the neurons with the basis' modes in the target's directions T and adds the loss on every
other mode in T; ``meanfield+whole`` drives them with the whole residual ``y − P_T f`` on T, every degree included,
through the tail's Gauss–Hermite rule: the gradient flow of the loss on T
(:class:`featureode.ode.meanfield.ReducedFlow` with ``drive="whole"``). Its RK4 step is set by the largest
eigenvalue of that flow's own kernel. Nothing is fitted.

Ratios are per seed (flow/MLP), then averaged over the case's seeds, as ``closure_scores.py`` does; each flow runs to
a loss of 0.05 (``--stop-loss``) or 3× the latest seed's t10 (6× its t50 without one), at most 5000 RK4 steps.
A stop loss just below 0.1 ends a run soon after its t10, the last number scored: about 38 of the 142 steps of
wide2's ``z0*z1*z2`` (steps of 5 from t10 = 383 to 571), the finest-ruled ones, follow the curve from 0.1 to 0.05.
One run gives both
bases: the flow does not read the basis, and the target basis' loss is the extended one less its modes outside T
(:meth:`~featureode.ode.meanfield.ReducedFlow.loss_on_T`; cases kept before this was recorded have no target-basis
ratio). A configuration that another suite's file holds (the standard suite's base is the wide suite's) is not run
again: its crossing times are scored against this suite's runs. Every finished case is kept in ``--json``
(``whole_residual_SUITE.json``) at once, so a rerun resumes where the last one stopped; ``--md`` writes the table of
every case kept for the suite, beside the ``meanfield`` and ``meanfield+tail`` ratios of the same cases read from
the per-case tables of ``tail_loss.md``, with the counts over the same cases.

Run:  python docs/validation/whole_residual.py --suite standard|wide|wide2 [--cases 8,10] [--md FILE] [--json FILE]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from filelock import FileLock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import case_runs  # noqa: E402
from multidriver_oracle import (case_config, case_label, crossing, fmt, picked_cases, seed_mean,  # noqa: E402
                                stored_horizon, suite_parser, write_report)
from featureode.config import Config  # noqa: E402
from featureode.core.cache import atomic_bytes, cache_dir  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import MeanFieldError, ReducedFlow  # noqa: E402

NAME = "`meanfield+whole`"
#: ReducedFlow.run's longest step, the default of every case run before ``--h-max`` (``h = min(h_max, t/4)``)
H_MAX = 5.0


def keep_result(path: Path, key: str, value: dict) -> None:
    """Add ``value`` under ``key`` to the JSON table ``path``: under a file lock (other processes may have kept
    entries meanwhile), written atomically."""
    with FileLock(str(path) + ".lock"):
        kept = json.loads(path.read_text()) if path.exists() else {}
        kept[key] = value
        atomic_bytes(path, (json.dumps(kept, indent=1) + "\n").encode())


def retraining(who: str, suite: str, i: int, case: tuple, seed: int, t_max: "float | None",
               **training: object) -> tuple[float, float, Config]:
    """The stored ``(t50, t10)`` of a case's training with ``seed`` and the config that trains it again: the same
    network (config and seed), to ``t_max`` (default 1.6× the stored t10), one thread, no early stop, with the
    ``[training]`` keys ``training`` on top."""
    m50, m10 = stored(suite, case)[seed]
    if not math.isfinite(m10) and t_max is None:
        raise SystemExit(f"{who}: {suite}:{i} seed {seed} has no stored t10; give --t-max")
    t_max = t_max if t_max is not None else round(1.6 * m10, 1)
    cfg = case_config(case).replace(training={"t_max": t_max, "threads": 1, "seed": seed, "stop_loss": 0.0,
                                              **training})
    return m50, m10, cfg


def stored(suite: str, case: tuple) -> list[tuple[float, float]]:
    """``(t50, t10)`` of every stored MLP training of a case (NaN where it never crossed). The standard suite's
    table (``mlp_crossings_standard.csv``) names only the columns its grid varies (target, d, γ); the others are
    the suite's fixed values, which ``case`` holds."""
    if suite != "standard":
        return [(m50, m10) for _, m50, m10 in case_runs(suite, case)]
    _, _, target, d, _, _, gamma, _, _ = case
    with open(HERE / "mlp_crossings_standard.csv") as fh:
        return [(float(row["mlp_t50"] or "nan"), float(row["mlp_t10"] or "nan")) for row in csv.DictReader(fh)
                if row["target.expr"] == target and int(row["data.dim"]) == d
                and math.isclose(float(row["network.richness"]), gamma)]


def earlier_flow(case: tuple) -> "tuple[str, dict] | None":
    """A run of the same configuration kept for another suite (``whole_residual_*.json``) that crossed both
    levels: the flow does not depend on the suite, only the stored MLP runs it is scored against do."""
    for path in sorted(HERE.glob("whole_residual_*.json")):
        for key, r in json.loads(path.read_text()).items():
            if (r.get("case") == list(case[1:]) and "flow_T" in r
                    and all(math.isfinite(x) for x in r.get("flow", [math.nan]))):
                return key, r
    return None


def score_case(suite: str, case: tuple, integrator: str | None = None, sobol: tuple[int, ...] | None = None,
               exact_tail: bool = False, checkpoint: Path | None = None, stop_loss: float = 0.05,
               h_max: float = H_MAX) -> dict:
    """Run ``meanfield+whole`` on one case and score it against every stored training of it, on the extended
    basis (``ratios``) and on the target basis (``ratios_T``, the loss on T: :meth:`ReducedFlow.loss_on_T`).
    ``sobol``: the Sobol' rungs' exponents for |T| ≥ 3 in place of the package's ``TAIL_SOBOL``. ``exact_tail``:
    the tail by pair moments from the start (relu, erf; ``ReducedFlow(exact_tail=True)``), not only from where the
    rules stop certifying it. ``checkpoint``: the flow keeps its place there every five minutes and goes on from
    it when run again (:meth:`ReducedFlow.run`); ``seconds`` then counts every session's. ``stop_loss``: the loss
    at which the flow stops (kept as ``stop_loss``). ``h_max``: the longest step (kept as ``h_max``; a run kept
    without it took the package's 5)."""
    seeds = stored(suite, case)
    out: dict = {"label": case_label(*case), "case": list(case[1:]), "mlp": [list(s) for s in seeds]}
    if not seeds or not any(math.isfinite(m50) for m50, _ in seeds):
        out["note"] = "no stored run reached t50"
        return out
    same = earlier_flow(case)
    # a flow kept with other Sobol' rungs than those asked for is run again (entries without rungs: |T| < 3, or run
    # before the rungs were recorded)
    if same is not None and (sobol is None or tuple(same[1].get("sobol", sobol)) == sobol) and \
            same[1].get("h_max", H_MAX) == h_max:
        key, r = same
        for name, times in (("ratios", r["flow"]), ("ratios_T", r["flow_T"])):
            out[name] = [[times[0] / m50, times[1] / m10] for m50, m10 in seeds]
        out.update({k: r[k] for k in ("flow", "flow_T", "steps", "t_end", "monotone", "note", "seconds",
                                      "integrator", "sobol", "h_max") if k in r})
        out["reused"] = key
        return out
    start = time.time()
    theory = kernel_theory(case_config(case), with_gram=True)
    try:
        flow = ReducedFlow.from_theory(theory, drive="whole", exact_tail=True if exact_tail else None)
        if sobol is not None and flow.tail_sobol:
            flow.tail_sobol = sobol
        if flow.tail_sobol:
            out["sobol"] = list(flow.tail_sobol)
        horizon, last = stored_horizon(seeds), [start]
        said = [False]

        def progress(t: float) -> None:   # a line every five minutes: these runs take up to hours
            if flow.resumed is not None and not said[0]:
                said[0] = True
                print(f"  {out['label']}: went on from its checkpoint at t = {flow.resumed['t']:.1f} "
                      f"({flow.resumed['seconds'] / 60:.0f} min before)", file=sys.stderr, flush=True)
            if time.time() - last[0] >= 300:
                last[0] = time.time()
                print(f"  {out['label']}: t = {t:.1f} of {horizon:.0f} after {(last[0] - start) / 60:.0f} min",
                      file=sys.stderr, flush=True)

        ts, fs, error = flow.run(horizon, stop_loss=stop_loss, max_steps=5000, integrator=integrator,
                                 progress=progress, checkpoint=checkpoint, h_max=h_max)
        out["stop_loss"], out["h_max"] = stop_loss, h_max
        if flow.resumed is not None:
            out["resumed_from_t"] = flow.resumed["t"]
            start -= flow.resumed["seconds"]
    except MeanFieldError as exc:
        out.update(note=f"failed: {exc}", seconds=time.time() - start)
        return out
    out["integrator"] = flow.integrator
    # the tail by pair moments: from the start, or from where the rules stopped certifying it, or never
    out["exact_tail"] = "from the start" if exact_tail else flow.exact_tail
    loss, loss_T = flow.loss(ts, fs), flow.loss_on_T(ts, fs)
    out["flow"] = [crossing(ts, loss, 0.5), crossing(ts, loss, 0.1)]
    out["flow_T"] = [crossing(ts, loss_T, 0.5), crossing(ts, loss_T, 0.1)]
    out["loss_end"] = [float(loss[-1]), float(loss_T[-1])]   # where a run stopped early stood (both bases)
    out["ratios"] = [[out["flow"][0] / m50, out["flow"][1] / m10] for m50, m10 in seeds]
    out["ratios_T"] = [[out["flow_T"][0] / m50, out["flow_T"][1] / m10] for m50, m10 in seeds]
    m10s = [m10 for _, m10 in seeds if math.isfinite(m10)]
    tail_t, tail_v = flow.tail_path
    if m10s and tail_t[-1] >= np.mean(m10s):
        out["tail_at_t10"] = float(np.interp(np.mean(m10s), tail_t, tail_v))
    out.update(steps=len(ts) - 1, t_end=float(ts[-1]), monotone=bool(np.all(np.diff(loss) <= 1e-9)),
               note=error or "", seconds=time.time() - start)
    return out


Pair = tuple[float, float]


def earlier_rows(suite: str, page: Path = HERE / "tail_loss.md") -> dict[int, tuple[Pair, Pair]]:
    """The seed-mean ``(t50, t10)`` ratios of ``meanfield`` and ``meanfield+tail`` per case of ``suite``, read from
    the per-case tables of ``tail_loss.md`` (the same stored runs, scored the same way)."""
    def pair(cell: str) -> tuple[float, float]:
        return tuple(float(x) if x.strip() not in ("—", "") else math.nan for x in cell.split("/"))  # type: ignore

    out, section = {}, None
    for line in page.read_text().splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
        elif section == suite and line.startswith("| ") and line[2:3].isdigit():
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[int(cells[0].split(":")[0])] = (pair(cells[2]), pair(cells[3]))
    return out


def sobol_rungs(text: str) -> tuple[int, ...]:
    """``--sobol``'s value: increasing exponents m of the Sobol' rungs' 2^m nodes, 8 ≤ m ≤ 20 (each rung's drive
    holds three neurons × nodes arrays: ~3 GB at m = 15 with 4096 neurons, doubling per step)."""
    try:
        rungs = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers; e.g. 14,15,16") \
            from None
    if len(rungs) < 2 or any(not 8 <= m <= 20 for m in rungs) or any(b <= a for a, b in zip(rungs, rungs[1:])):
        raise argparse.ArgumentTypeError(f"{text!r}: give at least two increasing exponents between 8 and 20 "
                                         "(the finest pair certifies the tail), e.g. 14,15,16")
    return rungs


def main() -> int:
    parser = suite_parser(__doc__.splitlines()[0], ("standard", "wide", "wide2"))
    parser.add_argument("--integrator", choices=("rk4", "rkc"), default=None,
                        help="RK4 at 1.5/λ_max or RKC's stages for λ_max at the accuracy's step (default: the "
                        "variant's, RKC; ReducedFlow.run)")
    parser.add_argument("--rerun", action="store_true",
                        help="run again the picked cases kept without a target-basis ratio (the first round's) or "
                        "stopped before their end (a tail the rules did not resolve, a neuron outside the table "
                        "of means)")
    parser.add_argument("--sobol", default=None, type=sobol_rungs,
                        help="comma-separated exponents of the Sobol' rungs for |T| ≥ 3 (default the package's "
                        "TAIL_SOBOL, 14,15; 16 takes ~7 GB with 4096 neurons)")
    parser.add_argument("--exact-tail", action="store_true",
                        help="the tail by pair moments from the start (relu, erf), not only where the rules stop "
                        "certifying it (the package's default); the rules then only certify the drive")
    parser.add_argument("--json", type=Path, help="per-case results, kept as each case finishes "
                        "(default: whole_residual_SUITE.json beside this script)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="where each flow keeps its place every five minutes, SUITE_CASE.npz (default: "
                        "checkpoints/ in featureode's cache folder); a case run again goes on from its place")
    parser.add_argument("--h-max", type=float, default=H_MAX,
                        help="the flow's longest step (default 5, ReducedFlow.run's; h = min(h_max, t/4)): RKC's "
                        "stages grow as sqrt(h), so its cost per unit t falls as 1/sqrt(h_max) on long runs; 20 "
                        "moved wide:37's crossings by ≤ 0.03%% but made wide:7's run unstable (whole_residual.md)")
    parser.add_argument("--stop-loss", type=float, default=0.05,
                        help="the loss at which each flow stops (default 0.05; 0.09 ends it soon after its t10)")
    args = parser.parse_args()
    if not (math.isfinite(args.h_max) and 0 < args.h_max <= 50):
        parser.error(f"--h-max {args.h_max} must be in (0, 50]")
    if not 0 < args.stop_loss < 0.1:
        parser.error(f"--stop-loss {args.stop_loss} must be in (0, 0.1): a flow must pass t10 (a loss of 0.1)")
    args.checkpoint_dir = args.checkpoint_dir or cache_dir() / "checkpoints"
    args.json = args.json or HERE / f"whole_residual_{args.suite}.json"
    kept = json.loads(args.json.read_text()) if args.json.exists() else {}
    for i, case in picked_cases(args):
        key = f"{args.suite}:{i}"
        if key in kept and not (args.rerun and "ratios" in kept[key] and (
                "ratios_T" not in kept[key] or kept[key].get("note", "").startswith("stopped"))):
            continue
        r = score_case(args.suite, case, args.integrator, args.sobol, args.exact_tail,
                       args.checkpoint_dir / f"{args.suite}_{i}.npz", args.stop_loss, args.h_max)
        keep_result(args.json, key, r)   # other processes may have kept cases of this suite meanwhile
        kept = json.loads(args.json.read_text())
        print(f"{i}: {r['label']}: {r.get('ratios')} {r.get('note', '')} ({r.get('seconds', 0):.0f} s)",
              file=sys.stderr, flush=True)
    target_name = f"{NAME}, target basis"
    rows, before = [], earlier_rows(args.suite)
    pairs: dict[str, list] = {"`meanfield`": [], "`meanfield+tail`": [], NAME: [], target_name: []}
    nan2 = (math.nan, math.nan)
    for key, r in sorted(kept.items(), key=lambda kv: int(kv[0].split(":")[1])):
        if not key.startswith(args.suite + ":"):
            continue
        mf, mf_tail = before.get(int(key.split(":")[1]), (nan2, nan2))
        ratios, ratios_T = (seed_mean(r.get(name, [])) for name in ("ratios", "ratios_T"))
        mlp = [tuple(s) for s in r["mlp"]]
        if mlp and all(math.isfinite(m10) for _, m10 in mlp):
            for name, pair in (("`meanfield`", mf), ("`meanfield+tail`", mf_tail), (NAME, ratios),
                               (target_name, ratios_T)):
                pairs[name].append(pair)
        mean50 = np.nanmean([m50 for m50, _ in mlp]) if mlp else math.nan
        mean10 = np.nanmean([m10 for _, m10 in mlp]) if any(math.isfinite(m10) for _, m10 in mlp) else math.nan
        tail = r.get("tail_at_t10")
        rows.append([f"{key.split(':')[1]}: {r['label']}", f"{fmt(mean50)} / {fmt(mean10)}",
                     " / ".join(fmt(x) for x in mf), " / ".join(fmt(x) for x in mf_tail),
                     " / ".join(fmt(x) for x in ratios), " / ".join(fmt(x) for x in ratios_T),
                     "—" if tail is None else f"{tail:.4f}",
                     {True: "yes", False: "**no**"}.get(r.get("monotone"), "—"), str(r.get("steps", "—")),
                     f"{r.get('seconds', 0):.0f}",
                     "; ".join(x for x in (r.get("note", ""), r.get("reused") and f"the flow of {r['reused']}") if x)])
    head = ["case", "MLP t50 / t10", "`meanfield` t50 / t10 ratio", "`meanfield+tail` t50 / t10 ratio",
            f"{NAME} t50 / t10 ratio", "on the target basis", "tail at the MLP's t10 (of L(0))", "loss monotone",
            "steps", "s", "note"]
    write_report(head, rows, args.md, pairs if pairs[NAME] else None,
                 counted="every stored run crossed both levels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
