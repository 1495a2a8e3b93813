"""Where a validation case fails: the network's finite width, or the ODE's truncated basis?

Takes one case of a validation suite (default: `standard`'s staircase(3) at γ = 0.005, whose MLP test loss does not
reach 10% within the horizon at N = 1024), trains its MLP at several widths N, solves its feature ODE on extended
bases of growing size (``extended_max_modes:extended_degree``), and compares every MLP run with every ODE basis by
the metrics of theory §5. No constant is fitted: the ODE does not depend on N (its kernel is the infinite-width one),
so each basis is solved once, and each width is trained once.

Writes ``OUT/study.md`` (the table) and ``OUT/study.json`` (the rows), with the runs in ``OUT/mlp_N<width>/`` and
``OUT/ode_<modes>_<degree>/``; finished MLP runs are reused when the script is run again.

Run:  python examples/convergence_study.py --out study_out [--case NAME] [--widths 1024 4096] [--bases 40:2 300:4]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from featureode.config import ConfigError
from featureode.workflow.grid import load_grid, suite_names, suite_path
from featureode.kernel.theory import KernelError
from featureode.results.metrics import Ratio
from featureode.export.report import build_report
from featureode.workflow.runs import mlp_trajectory
from featureode.ode.solve import solve_config
from featureode.workflow.sweeps import apply_basis, point_config


def _basis(text: str) -> tuple[int, int]:
    """``"M:K"`` → (extended_max_modes, extended_degree)."""
    try:
        modes, degree = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a basis is MAX_MODES:DEGREE such as 40:2, got {text!r}") from None
    if modes < 1 or degree < 0:
        raise argparse.ArgumentTypeError(f"a basis needs MAX_MODES ≥ 1 and DEGREE ≥ 0, got {text!r}")
    return modes, degree


def _width(text: str) -> int:
    """A network width: an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a width is an integer ≥ 1, got {text!r}")
    return value


def study(suite: str, case_name: str, widths: Sequence[int], bases: Sequence[tuple[int, int]], seed: int,
          out: Path, progress: bool = True) -> list[dict[str, Any]]:
    """One row per (width, basis, ODE variant): final losses and the ODE/MLP ratios (or their bounds). Every config
    is built (and so checked) before anything is solved or trained."""
    base = point_config(apply_basis(load_grid(suite_path(suite)), "extended"), case_name, seed)
    configs = {width: base.replace(network={"width": width}) for width in widths}
    odes = {}
    for modes, degree in bases:
        cfg = base.replace(ode={"extended_max_modes": modes, "extended_degree": degree})
        # a failed variant keeps its partial curve (status.error): the report marks it as failed
        odes[modes, degree] = solve_config(cfg, out / f"ode_{modes}_{degree}")
    rows = []
    for width, cfg in configs.items():
        mlp = mlp_trajectory(cfg, out / f"mlp_N{width}", progress=progress)
        for (modes, degree), ode in odes.items():
            rep = build_report(cfg, ode, mlp)
            m = rep.mlp
            for name, v in rep.variants.items():
                met, ins = v.metrics, v.in_support
                rows.append({"width": width, "max_modes": modes, "degree": degree, "modes": len(ode.modes),
                             "variant": name, "t_end": float(m.t[-1]), "mlp_complete": m.complete,
                             "mlp_loss_end": float(m.loss[-1]),
                             "mlp_in_support_end": float(m.in_support_loss[-1] / m.in_support_loss[0]),
                             "ode_loss_end": float(v.loss[-1]) if len(v.loss) else None,
                             "t50_ratio": met.t50_ratio if met else Ratio.unknown(),
                             "t10_ratio": met.t10_ratio if met else Ratio.unknown(),
                             "in_support_t10_ratio": ins.t10_ratio.value if ins else None})
    return rows


def table(rows: Sequence[dict[str, Any]], title: str) -> str:
    """The rows as a Markdown table."""
    f = lambda x: "—" if x is None else f"{x:.3g}"  # noqa: E731
    lines = [f"# {title}", "", "Losses are L/L(0) at the end of the horizon (of the MLP's run where it stopped early: "
             "marked with its end time); ratios are ODE/MLP (`< x`: the MLP does not cross within the horizon, so "
             "the ratio is only bounded). No constant is fitted.", "",
             "| N | extended basis (modes) | variant | MLP test loss | MLP in-support loss | ODE test loss | t50 ratio | "
             "t10 ratio | in-support t10 ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        stop = "" if r["mlp_complete"] else f" (stopped at t = {r['t_end']:.4g})"
        lines.append(f"| {r['width']}{stop} | +{r['degree']}, ≤ {r['max_modes']} ({r['modes']}) | {r['variant']} | "
                     f"{f(r['mlp_loss_end'])} | {f(r['mlp_in_support_end'])} | {f(r['ode_loss_end'])} | "
                     f"{r['t50_ratio'].text()} | {r['t10_ratio'].text()} | "
                     f"{f(r['in_support_t10_ratio'])} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Parse the command line, run :func:`study`, write ``OUT/study.md`` and ``OUT/study.json``; returns the rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--suite", default="standard", choices=suite_names())
    ap.add_argument("--case", default="staircase_3_d16_g0.005")
    ap.add_argument("--widths", type=_width, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--bases", type=_basis, nargs="+", default=[(40, 2), (120, 4), (300, 4)],
                    help="extended bases as MAX_MODES:DEGREE (degree added to each target mode)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        rows = study(args.suite, args.case, args.widths, args.bases, args.seed, args.out, progress=not args.quiet)
    except (ConfigError, KernelError) as exc:  # a bad case, width or basis, named by the library
        ap.error(str(exc))
    text = table(rows, f"convergence study: `{args.case}` of suite `{args.suite}`, seed {args.seed}")
    (args.out / "study.md").write_text(text)
    (args.out / "study.json").write_text(json.dumps(
        [r | {k: r[k].to_json() for k in ("t50_ratio", "t10_ratio")} for r in rows], indent=1, allow_nan=False))
    print(text)
    return rows


if __name__ == "__main__":
    main()
