"""Pilot table of the second-order closures (issue 14, a PILOT: one seed per case, five cases).

``python docs/validation/closures_pilot.py RUN [RUN ...] --out docs/validation/closures_pilot.md`` reads each run
folder's ``report.json`` (made by ``featureode compare``), and, when a folder ``RUN-ext`` beside it holds the same
MLP run compared on the extended basis, that one too. For every target-basis run it also replays the measured
``λ_β(t)`` (:func:`featureode.replay.replay_run`) and writes the diagnostics figure into the run folder
(``report_diagnostics.png``). The diagnostics column is the growth ``λ_β(t)/λ_β(0)`` of the target's leading mode
at the MLP's t10 (or its last time), measured (eNTK) against each closure's prediction.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # this checkout's package
from featureode.diagnostics import save_diagnostics  # noqa: E402
from featureode.replay import replay_run  # noqa: E402
from featureode.trajectory import ODEResult, Trajectory, read_json  # noqa: E402

VARIANTS = ("lazy", "displacement", "second_order", "resummed")


def _fmt(x: float | None, bound: list | None = None) -> str:
    """A ratio, or its bound ``[lo, hi]`` when a curve ended before crossing (``hi`` null: unbounded above)."""
    if x is not None:
        return f"{x:.3g}"
    if bound:
        lo, hi = bound
        if hi is None or hi > 1e300:
            return f"> {lo:.3g}"
        return f"< {hi:.3g}"
    return "—"


def _ratios(report: dict, name: str) -> str:
    v = report["variants"].get(name)
    if v is None:
        return "—"
    return f"{_fmt(v['t50_ratio'], v.get('t50_ratio_range'))} / {_fmt(v['t10_ratio'], v.get('t10_ratio_range'))}"


def _case(report: dict) -> str:
    c = report["config"]
    return (f"{c['target']['expr']}, d={c['data']['dim']}, exp={c['data']['exponent']}, "
            f"γ={c['network']['richness']}, {c['network']['activation']}, N={c['network']['width']}")


def _growth_at(traj: Trajectory, mode: str, t: float) -> float | None:
    if traj.lam is None or mode not in traj.modes:
        return None
    lam = np.asarray(traj.lam, float)[:, list(traj.modes).index(mode)]
    if not lam[0] > 0:
        return None
    return float(np.interp(t, np.asarray(traj.t, float), lam / lam[0]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    head = ("| case | MLP t50 / t10 | " + " | ".join(f"{v} t50 / t10" for v in VARIANTS)
            + " | replay t50 / t10 (in-support) | λ growth of the leading mode at MLP t10: measured; "
            + "; ".join(VARIANTS[1:]) + " |")
    rows = [head, "|" + "---|" * (len(VARIANTS) + 4)]
    ext_rows = ["| case | " + " | ".join(f"{v} t50 / t10" for v in VARIANTS) + " |",
                "|" + "---|" * (len(VARIANTS) + 1)]
    for run in args.runs:
        report = read_json(run / "report.json")
        mlp = dataclasses.replace(Trajectory.load(run, "mlp"), kind="mlp")
        ode = ODEResult.load(run)
        rep = replay_run(run)
        variants = {**ode.variants, "replay": rep}
        save_diagnostics(mlp, variants, run, title=_case(report))
        m = report["mlp"]
        rep_cell = (f"{_fmt(rep.t50 / m['in_support_t50'] if rep.t50 and m['in_support_t50'] else None)} / "
                    f"{_fmt(rep.t10 / m['in_support_t10'] if rep.t10 and m['in_support_t10'] else None)}")
        v = np.asarray(mlp.target, float)
        lead = list(mlp.modes)[int(np.argmax(np.abs(v)))]
        t_at = m["t10"] or float(mlp.t[-1])
        growth = [_growth_at(mlp, lead, t_at)] + [_growth_at(ode.variants[n], lead, t_at) for n in VARIANTS[1:]]
        gcell = f"{lead}: " + "; ".join(_fmt(x) for x in growth)
        rows.append(f"| {_case(report)} | {m['t50']:.3g} / {_fmt(m['t10'])} | "
                    + " | ".join(_ratios(report, n) for n in VARIANTS) + f" | {rep_cell} | {gcell} |")
        ext = run.parent / f"{run.name}-ext" / "report.json"
        if ext.is_file():
            er = read_json(ext)
            ext_rows.append(f"| {_case(er)} | " + " | ".join(_ratios(er, n) for n in VARIANTS) + " |")
    text = ["# Second-order closures: pilot (issue 14)", "",
            "**A pilot, not a validation**: one seed per case, five cases chosen to discriminate (the failures issue "
            "14 records), ReLU, σ_b = 0.5, N = 1024, B = 2048; test-loss ratios ODE/MLP (t50 / t10). No constant is "
            "fitted: `second_order` and `resummed` use the per-neuron second-order constants S_βα "
            "(`featureode/second_order.py`, Monte Carlo over 10⁵ init neurons, `derivations/closure_second_order.py`)."
            " `replay` is the kernel flow driven by the measured λ_β(t) (uses measurements, not parameter-free), "
            "compared on the in-support loss. Made by `python docs/validation/closures_pilot.py RUN... --out FILE` "
            "from the run folders' report.json.", "", "## Target basis", "", *rows, "",
            "## Extended basis (the same MLP runs)", "", *ext_rows, ""]
    args.out.write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
