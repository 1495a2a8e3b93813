"""What the diagnostics say about each case of a validation sweep (issue 14, item 6), read from its run folders.

For every case (a point of the grid, all its seeds) it prints the seed-mean t50 / t10 ratios (ODE/MLP, test loss) of
each variant and the eigenvalue that limits the learning: the target mode β with the smallest λ_β(0) (among those
the target weighs). For it, the growth measured in the network, λ_β(t*)/λ_β(0) (mlp.json ``lambda``, the eNTK
Rayleigh quotient), and for each variant the ratio of its integrated eigenvalue to the measured one,
∫_0^{t*} λ_β^{ODE} dt / ∫_0^{t*} λ_β^{MLP} dt — on the diagonal kernel flow f_β = v_β(1 − exp(−∫λ_β)), so a ratio
above 1 learns the mode early and below 1 late. t* is the network's t10 (its t50 when its loss never reaches 10%);
curves are interpolated linearly in t. No constant is fitted.

The reading column applies fixed rules:

- ``backbone``: the replay of the measured eigenvalues (the ``replay`` variant, when the sweep has it) is itself
  off by more than 10% on t50 or t10, so the diagonal kernel flow misses whatever the closure does;
- ``ok``: the reference variant is within ±10% on both;
- otherwise ``closure``: the reference variant's integrated-eigenvalue ratio (< 1: the closure grows λ too slowly
  and learns late; > 1: too fast).

    python docs/validation/closure_diagnosis.py OUT [--reference displacement] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np


def _at(t: np.ndarray, y: np.ndarray, when: float) -> float:
    """``y(when)`` interpolated log-linearly in t (y > 0), NaN outside the sampled times."""
    ok = (t > 0) & np.isfinite(y) & (y > 0)
    if ok.sum() < 2 or not (t[ok][0] <= when <= t[ok][-1]):
        return math.nan
    return float(np.exp(np.interp(math.log(when), np.log(t[ok]), np.log(y[ok]))))


def _integral(t: np.ndarray, y: np.ndarray, upto: float) -> float:
    """``∫_0^upto y dt`` (trapezoid on the samples, y linear in t between them; NaN beyond the sampled times)."""
    ok = np.isfinite(y)
    t, y = t[ok], y[ok]
    if t.size < 2 or t[0] > 0 or t[-1] < upto:
        return math.nan
    grid = np.concatenate([t[t < upto], [upto]])
    vals = np.interp(grid, t, y)
    return float(np.sum(np.diff(grid) * (vals[1:] + vals[:-1]) / 2))


def run_diagnosis(folder: Path) -> dict | None:
    """Ratios and eigenvalue growths of one run folder (``None`` when it has no finished report)."""
    try:
        mlp = json.loads((folder / "mlp.json").read_text())
        ode = json.loads((folder / "ode.json").read_text())
        rep = json.loads((folder / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    # the network measures the target's modes (mlp.json "modes"); the ODE's basis may hold more (extended)
    target = np.asarray(mlp["target"], float)
    lam_m = np.asarray(mlp["lambda"], float)
    t_m = np.asarray(mlp["t"], float)
    weighted = [b for b in range(len(target)) if abs(target[b]) > 1e-12 and lam_m[0, b] > 0]
    beta = min(weighted, key=lambda b: lam_m[0, b]) if weighted else None
    mode = mlp["modes"][beta] if beta is not None else None
    beta_ode = ode["modes"].index(mode) if mode in ode["modes"] else None
    when = mlp.get("t10") or mlp.get("t50")
    out = {"mlp_t50": mlp.get("t50"), "mlp_t10": mlp.get("t10"), "mode": mode,
           "at": "t10" if mlp.get("t10") else "t50", "variants": {}}
    known = beta is not None and when is not None
    out["measured"] = _at(t_m, lam_m[:, beta], when) / lam_m[0, beta] if known else math.nan
    measured_integral = _integral(t_m, lam_m[:, beta], when) if known else math.nan
    for name, v in rep["variants"].items():
        entry = {"t50_ratio": v.get("t50_ratio"), "t10_ratio": v.get("t10_ratio")}
        tr = ode["variants"].get(name)
        if tr is not None and known and beta_ode is not None and "lambda" in tr:
            lam = np.asarray(tr["lambda"], float)
            entry["growth"] = _integral(np.asarray(tr["t"], float), lam[:, beta_ode], when) / measured_integral
        out["variants"][name] = entry
    return out


def _mean(xs: list) -> float:
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(vals)) if len(vals) == len(xs) and vals else math.nan


def _fmt(x: float, digits: int = 2) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def diagnose(out: Path, reference: str = "displacement") -> str:
    """The Markdown table of every case in the sweep folder ``out``."""
    cases: dict[str, list[dict]] = {}
    for folder in sorted((out / "runs").iterdir()):
        d = run_diagnosis(folder)
        if d is not None:
            cases.setdefault(re.sub(r"_s\d+$", "", folder.name), []).append(d)
    if not cases:
        raise SystemExit(f"{out}/runs holds no finished run (report.json, mlp.json and ode.json)")
    names = [n for n in cases[next(iter(cases))][0]["variants"] if n != "lazy"]
    stamp = lambda case: json.loads((out / "runs" / case / "config.json").read_text())["config"]  # noqa: E731
    head = ["case", "MLP t50 / t10"] + [f"{n} t50 / t10" for n in names] + [
        "slow mode", "λ(t*)/λ(0) measured"] + [f"{n} ∫λ ratio" for n in names if n != "replay"] + ["reading"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    counts: dict[str, int] = {}
    for case, runs in cases.items():
        c = stamp(case)
        label = (f"{c['network']['activation']}, {c['target']['expr']}, d={c['data']['dim']}, "
                 f"exp={c['data']['exponent']:g}, γ={c['network']['richness']:g}, σ_b={c['network']['bias_std']:g}, "
                 f"N={c['network']['width']}")
        row = [label, f"{_fmt(_mean([r['mlp_t50'] for r in runs]), 3)} / {_fmt(_mean([r['mlp_t10'] for r in runs]), 3)}"]
        ratios = {}
        for n in names:
            r50 = _mean([r["variants"].get(n, {}).get("t50_ratio") for r in runs])
            r10 = _mean([r["variants"].get(n, {}).get("t10_ratio") for r in runs])
            ratios[n] = (r50, r10)
            row.append(f"{_fmt(r50)} / {_fmt(r10)}")
        meas = _mean([r["measured"] for r in runs])
        row += [f"`{runs[0]['mode']}` at MLP {runs[0]['at']}", _fmt(meas)]
        growth = {n: _mean([r["variants"].get(n, {}).get("growth") for r in runs]) for n in names if n != "replay"}
        row += [_fmt(growth[n]) for n in names if n != "replay"]
        dev = lambda p: max(abs(p[0] - 1), abs(p[1] - 1)) if all(map(math.isfinite, p)) else math.inf  # noqa: E731
        if "replay" in ratios and dev(ratios["replay"]) > 0.10:
            reading = f"backbone (replay {_fmt(ratios['replay'][0])} / {_fmt(ratios['replay'][1])})"
            key = "backbone"
        elif reference in ratios and dev(ratios[reference]) <= 0.10:
            reading, key = "ok", "ok"
        else:
            g = growth.get(reference, math.nan)
            reading = f"closure: ∫λ {_fmt(g)}× the measured" if math.isfinite(g) else "closure (no ratio)"
            key = "closure, λ too slow" if g < 1 else "closure, λ too fast" if g > 1 else "closure, undecided"
        counts[key] = counts.get(key, 0) + 1
        lines.append("| " + " | ".join(row + [reading]) + " |")
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    return (f"Reference `{reference}`; {len(cases)} cases ({summary}). Ratios are seed means of ODE/MLP; growths are "
            "of the slow mode β: the measured λ_β(t*)/λ_β(0) and each variant's ∫_0^{t*} λ_β dt over the measured one, "
            "seed means.\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the sweep's output folder (holding runs/)")
    p.add_argument("--reference", default="displacement", help="the closure whose misses are read")
    p.add_argument("--out", dest="dest", type=Path, help="write the Markdown here (default: print it)")
    args = p.parse_args(argv)
    text = diagnose(args.out, args.reference)
    if args.dest:
        args.dest.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
