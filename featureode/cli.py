"""Command-line interface ``featureode`` (theory §6): parser, subcommands and error handling.

Subcommands: ``hermite``, ``decompose``, ``kernel``, ``derive``, ``solve``, ``simulate``, ``compare``, ``validate``,
``sweep``, ``plot``.
Bad input ends with a one-line ``featureode: error: …`` on stderr and exit status 2 (:data:`USER_ERRORS`: every
:class:`~featureode.core.errors.FeatureODEError` and the OS file errors); an
interrupt ends with exit status 130; ``--traceback`` shows the Python traceback instead.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from featureode.core.basis import BASES
from featureode.core.errors import FeatureODEError


def _print_json(obj: Any) -> None:
    from featureode.results.trajectory import json_ready

    print(json.dumps(json_ready(obj), indent=2))


# ----------------------------------------------------------------------------------------------------------------
# foundation commands
# ----------------------------------------------------------------------------------------------------------------
def cmd_hermite(args: argparse.Namespace) -> int:
    """``featureode hermite``: ``μ_n = E[σ(s ξ + b) h_n(ξ)]``, ``n = 0 … max_degree``, of an activation."""
    from featureode.calculus.activations import get_activation

    act = get_activation(args.activation)
    coeffs = act.hermite_all(args.max_degree, args.bias, args.scale)
    if args.json:
        _print_json({"activation": act.name, "bias": args.bias, "scale": args.scale,
                     "coefficients": [c.value for c in coeffs], "exact": [c.latex for c in coeffs]})
        return 0
    how = "exact (SymPy closed form)" if act.is_exact else f"mpmath quadrature at {act.precision} digits"
    print(f"Hermite coefficients μ_n = E[σ(s ξ + b) h_n(ξ)] of {act.name} ({act.description}), "
          f"b = {args.bias}, s = {args.scale}; {how}")
    print(f"{'n':>3}  {'μ_n':>24}  exact")
    for n, c in enumerate(coeffs):
        exact = "—" if c.exact is None else str(c.exact)
        print(f"{n:>3}  {c.value + 0.0:>24.16g}  {exact if len(exact) <= 80 else '(long closed form; see --json)'}")
    return 0


def cmd_decompose(args: argparse.Namespace) -> int:
    """``featureode decompose``: modes ``α`` and coefficients ``v_α`` of ``f* = Σ_α v_α h_α(z)``."""
    import sympy as sp

    from featureode.calculus.data import Spectrum
    from featureode.calculus.targets import parse_target

    spec = Spectrum.power_law(args.dim, args.exponent, args.offset)
    tgt = parse_target(args.target, spec, normalize=not args.no_normalize)

    def finite(v: float) -> "float | None":   # beyond float64 (z0**500's E[z0^500] = 499!!): null; exact is given
        return float(v) if math.isfinite(v) else None

    def shown(v: float, exact: Any) -> str:
        return f"{v:.16g}" if math.isfinite(v) else str(sp.N(exact, 16))

    rows = [{"mode": str(m), "index": {str(i): n for i, n in m.items}, "coefficient": finite(v),
             "exact": str(e), "latex": sp.latex(e), "shown": shown(v, e)}
            for m, v, e in zip(tgt.modes, tgt.coefficients, tgt.exact)]
    if args.json:
        _print_json({"target": args.target, "dim": args.dim, "normalized": not args.no_normalize,
                     "constant": finite(tgt.constant), "constant_exact": str(tgt.constant_exact),
                     "modes": [{k: v for k, v in r.items() if k != "shown"} for r in rows]})
        return 0
    print(f"f*(x) = {args.target}   (d = {args.dim}, {spec.description})")
    print("normalised to unit variance (constant term reported separately)" if not args.no_normalize
          else "coefficients as written")
    width = max([len(r["mode"]) for r in rows] + [4])
    print(f"{'mode':<{width}}  {'v_α':>22}  exact")
    for r in rows:
        exact = r["exact"] if len(r["exact"]) <= 60 else "(long closed form; see --json)"
        print(f"{r['mode']:<{width}}  {r['shown']:>22}  {exact}")
    if not args.no_normalize:
        print(f"constant term (not a mode of the normalised target): {shown(tgt.constant, tgt.constant_exact)}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# config-driven commands
# ----------------------------------------------------------------------------------------------------------------
def _config(path: "str | argparse.Namespace | None") -> Any:
    """The config of a command: ``args.config`` laid over the built-in default, with ``args.set`` applied."""
    from featureode.config import load_config

    if isinstance(path, argparse.Namespace):
        return load_config(path.config, getattr(path, "set", None) or ())
    return load_config(path)


def _grid_with_sets(grid: Any, sets: Sequence[str]) -> Any:
    """``grid`` with ``--set`` items applied to its base config (a key that is an axis of the grid is refused)."""
    if not sets:
        return grid
    import dataclasses

    from featureode.config import apply_sets, parse_set
    from featureode.workflow.grid import GridError

    for item in sets:
        key = ".".join(parse_set(item)[0][:2])
        if key in grid.keys:
            raise GridError(f"--set {item!r}: {key} is an axis of {grid.source}; change it in the grid file")
    return dataclasses.replace(grid, base=apply_sets(grid.base, sets))


def _config_for_out(args: argparse.Namespace) -> Any:
    """The config of ``args.config`` after every check that can be made before computing, with ``args.out`` created,
    locked for this command (a second command on the folder waits briefly, then refuses) and stamped for it; a folder
    holding results of another config is refused unless ``args.force``, which removes those results first
    (:func:`featureode.workflow.runs.prepare`)."""
    import atexit

    from featureode.workflow.runs import prepare, release

    cfg = _config(args)
    prepare(Path(args.out), cfg, force=args.force)
    atexit.register(release, Path(args.out))  # the command holds the folder until the process ends
    return cfg


def cmd_kernel(args: argparse.Namespace) -> int:
    """``featureode kernel``: exact and HEA ``λ_β(0)`` of the target's modes, ``Λ_l`` and ``c_l``."""
    from featureode.kernel.theory import kernel_report

    cfg = _config(args)
    if args.hea_figure:
        from featureode.export.style import figure_format

        figure_format(args.hea_figure, getattr(args, "format", None))   # a bad suffix is refused before the work
    rep = kernel_report(cfg)
    if args.hea_figure:
        from featureode.export.hea_figure import exact_vs_hea_figure

        exact_vs_hea_figure(args.hea_figure, cfg.network.activation, cfg.network.bias_std,
                            exponent=cfg.data.exponent, offset=cfg.data.offset, style=args.style)
    if args.json:
        _print_json(rep)
        return 0
    print(f"{'mode':<16} {'exact λ(0)':>14} {'± stderr':>10} {'HEA':>12} {'HEA/exact':>10}")
    for m, e, s, h in zip(rep["modes"], rep["exact"], rep["exact_stderr"], rep["hea"]):
        ratio = f"{h / e:>10.3f}" if e != 0 else f"{'—':>10}"
        print(f"{m:<16} {e:>14.6g} {s:>10.2g} {h:>12.6g} {ratio}")
    print("Λ_l (HEA level coefficients):", ", ".join(f"{x:.6g}" for x in rep["level_coefficients"]))
    print("c_l (displacement constants):", ", ".join(f"{x:.6g}" for x in rep["c"]))
    return 0


def cmd_derive(args: argparse.Namespace) -> int:
    """``featureode derive``: the LaTeX document of the config's ODE family."""
    from featureode.export.latex import derive_document, derive_fragment

    cfg = _config(args)
    labels = not args.no_labels
    text = derive_fragment(cfg, labels) if args.fragment else derive_document(cfg, labels=labels)
    if args.latex:
        Path(args.latex).parent.mkdir(parents=True, exist_ok=True)
        Path(args.latex).write_text(text)
        print(f"wrote {args.latex}")
    else:
        print(text)
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    """``featureode solve``: integrate every ODE variant; writes ``DIR/ode.json``."""
    from featureode.ode.solve import solve_config

    from featureode.workflow.runs import mark_finished

    cfg = _config_for_out(args)
    res = solve_config(cfg, args.out, progress=not args.quiet)
    mark_finished(args.out, cfg, ("ode.json", "ode.npz"))
    for name, tr in res.variants.items():
        print(f"{name:<24} t50 = {_fmt(tr.t50)}   t10 = {_fmt(tr.t10)}")
    print(f"wrote {Path(args.out) / 'ode.json'}")
    for error in res.errors.values():
        print(f"featureode: error: {error}", file=sys.stderr)
    return 1 if res.errors else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """``featureode simulate``: train the reference MLP; writes ``DIR/mlp.json``."""
    from featureode.sim.mlp import simulate_config

    res = simulate_config(_config_for_out(args), args.out, resume=args.resume, progress=not args.quiet)
    print(f"MLP: t50 = {_fmt(res.t50)}   t10 = {_fmt(res.t10)}")
    print(f"wrote {Path(args.out) / 'mlp.json'}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``featureode compare``: ODE vs MLP; writes ``DIR/report.*``."""
    from featureode.workflow.compare import compare_config

    compare_config(_config_for_out(args), args.out, progress=not args.quiet, figure_variant=args.figure_variant,
                   fmt=args.format, style=args.style)
    print(Path(args.out, "report.md").read_text())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``featureode validate``: run a shipped validation grid (``featureode/suites/SUITE.toml``) as a sweep; writes
    ``DIR/results.csv`` and ``DIR/summary.*``."""
    from featureode.workflow.grid import GridError, load_grid, suite_names, suite_path
    from featureode.workflow.sweeps import apply_basis, list_text, make_executor, plan, run_sweep

    if args.suite is None:
        if not args.list:
            raise GridError(f"name a suite ({', '.join(suite_names())}), or pass --list to see them")
        for name in suite_names():
            g = load_grid(suite_path(name))
            print(f"{name:<12} {g.size:>4} points × {len(g.seeds)} seeds = {g.n_runs} runs")
        return 0
    grid = _grid_with_sets(apply_basis(load_grid(suite_path(args.suite)), args.basis), args.set)
    if args.list:  # without --out: an empty folder, so nothing counts as finished
        with tempfile.TemporaryDirectory(prefix="featureode-list-") as empty:
            print(list_text(grid, plan(grid, args.out or empty, yes=True), False, args.jobs))
        return 0
    if args.out is None:
        raise GridError(f"validate {args.suite} needs --out DIR (the sweep's folder); only --list runs without it")
    executor = make_executor(args.executor, args.jobs, args.scheduler)
    try:
        res = run_sweep(grid, args.out, executor, force=args.force, progress=not args.quiet,
                        title=f"validation suite `{args.suite}`")
    finally:
        executor.close()
    _sweep_footer(res)
    summary = Path(args.out, "summary.md")
    if summary.exists():
        print(summary.read_text())
    return 1 if res.failed else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """``featureode sweep``: run every point of a grid file (theory §7); writes ``DIR/results.csv``,
    ``DIR/summary.md`` and ``DIR/runs/``."""
    from featureode.workflow.grid import load_grid
    from featureode.workflow.sweeps import apply_basis, list_text, make_executor, plan, run_sweep

    grid = _grid_with_sets(apply_basis(load_grid(args.grid), args.basis), args.set)
    if args.list:
        print(list_text(grid, plan(grid, args.out, args.ode_only, yes=True), args.ode_only, args.jobs))
        return 0
    executor = make_executor(args.executor, args.jobs, args.scheduler)
    try:
        res = run_sweep(grid, args.out, executor, ode_only=args.ode_only, force=args.force,
                        progress=not args.quiet, yes=args.yes)
    finally:
        executor.close()
    _sweep_footer(res)
    if args.plot:
        from featureode.workflow.plot import natural_plots

        for path in natural_plots(args.out, grid, args.ode_only, fmt=args.format, style=args.style):
            print(f"wrote {path}")
    return 1 if res.failed else 0


def _sweep_footer(res: Any) -> None:
    print(f"{len(res.outcomes)} runs: {res.computed} computed, {res.reused} reused, {len(res.failed)} failed; "
          f"wrote {res.out / 'results.csv'}")
    for o in res.failed:
        print(f"  failed {o.name}: {o.status}")


def cmd_plot(args: argparse.Namespace) -> int:
    """``featureode plot``: a phase diagram (heatmap over two keys, line over one) of a sweep's results."""
    from featureode.export.style import figure_format, save_figure
    from featureode.workflow.plot import CURVE_METRICS, PlotError, curves_figure, phase_figure
    from featureode.workflow.sweeps import read_results

    where = {}
    for item in args.where:
        key, sep, value = item.partition("=")
        if not sep:
            raise PlotError(f"--where {item!r} must be KEY=VALUE, e.g. --where data.dim=16")
        where[key.strip()] = value.strip()
    fmt = figure_format(args.out, args.format)
    out = Path(args.out) if args.out else Path(args.dir) / "plots" / f"{args.metric}.{fmt}"
    variant = args.variant[0] if args.variant and len(args.variant) == 1 else args.variant
    if args.metric in CURVE_METRICS:   # the curves themselves, one line per run coloured by --x
        if args.y:
            raise PlotError(f"--metric {args.metric} draws curves against t coloured by --x; drop --y")
        folder = Path(args.dir).parent if Path(args.dir).name == "results.csv" else Path(args.dir)
        fig = curves_figure(folder, args.x, args.metric, variant, where or None, style=args.style)
    else:
        fig = phase_figure(read_results(args.dir), args.x, args.y, args.metric, variant, where or None,
                           style=args.style)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"wrote {save_figure(fig, out, fmt, args.style)}")
    return 0


def _os_error_text(exc: OSError) -> str:
    """``PATH: ENOSPC (No space left on device)`` for an OS error (the errno's name and meaning)."""
    import errno
    import os

    name = errno.errorcode.get(exc.errno) if exc.errno else None
    meaning = exc.strerror or (os.strerror(exc.errno) if exc.errno else "") or str(exc) or type(exc).__name__
    where = exc.filename if exc.filename is not None else ""
    return f"{where}: " * bool(where) + (f"{name} ({meaning})" if name else meaning)


def _fmt(x: Any) -> str:
    return "not reached" if x is None else f"{x:.4g}"


# ----------------------------------------------------------------------------------------------------------------
DESCRIPTION = """\
featureode: the feature ODE of a two-layer MLP trained by gradient flow on anisotropic Gaussian data.

SymPy derives the Hermite coefficients of activations and targets, the feature ODE predicting the loss curve is
assembled from named terms, compiled and integrated, and validated against real PyTorch training of the network.
Commands that take a CONFIG read one TOML file (docs/guide/configuration.md), --set TABLE.KEY=VALUE changes a key;
without one they use the built-in default run (staircase(2), d = 16, width 1024, richness 0.5)."""

EPILOG = """\
examples:
  featureode hermite relu --max-degree 4                   Hermite coefficients of ReLU
  featureode decompose "x0^2 + staircase(3)" --dim 8       Hermite modes of a target
  featureode kernel examples/staircase3.toml --json        λ_β(0), Λ_l, c_l of a config
  featureode derive examples/staircase3.toml --latex ode.tex
  featureode solve examples/staircase3.toml --out runs/s3  the ODE variants alone (seconds)
  featureode compare --out featureode-out                  ODE vs MLP on the default run
  featureode validate quick --out runs/quick               a small validation grid

Exit status: 0 when everything asked for is done; 2 for bad input or an unusable file system (one line
"featureode: error: ...", naming the path and the errno for OS errors; --traceback shows the traceback); 1 when
the command ran but some of its results failed (solve: a variant; sweep/validate: a run), each written with its
status in ode.json / results.csv. "featureode COMMAND --help" describes the arguments of a command."""


def _count(minimum: int, maximum: int | None = None, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer ≥ ``minimum`` (and ≤ ``maximum``, a stated limit: ``why``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer ≥ {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer ≥ {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum} ({why}), got {value}")
        return value
    return parse


#: Stated limits of the foundation commands (beyond them the work takes minutes without a word).
MAX_HERMITE_DEGREE = 1000


def _out_dir(text: str) -> str:
    """An argparse type: a non-empty output folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a folder, got an empty string")
    return text


def _real(positive: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number (``> 0`` when ``positive``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or (positive and value <= 0):
            raise argparse.ArgumentTypeError(f"must be a finite number{' > 0' if positive else ''}, got {text}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (theory §6)."""
    p = argparse.ArgumentParser(prog="featureode", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traceback", action="store_true",
                   help="on an error, show the Python traceback instead of the one-line message")
    from featureode._version import __version__

    p.add_argument("--version", action="version", version=f"featureode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of these (featureode COMMAND --help for its arguments):")

    def add(name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        sp_ = sub.add_parser(name, help=help, description=help)
        sp_.set_defaults(func=fn)
        return sp_

    def figure_options(c: argparse.ArgumentParser, fmt: bool = True) -> None:
        from featureode.export.style import FORMATS, STYLES

        if fmt:
            c.add_argument("--format", choices=FORMATS, default=None if c.prog.endswith(" plot") else "png",
                           help="figure file format: png (raster), pdf or svg (vector)"
                           + ("; default: the --out suffix, else png" if c.prog.endswith(" plot") else
                              " (default png)"))
        c.add_argument("--style", choices=tuple(STYLES), default=None,
                       help="figure style: report (default), paper (6.75 in wide, 8 pt text), column (3.25 in, "
                            "8 pt text)")

    config_help = ("TOML config file, laid over the built-in default run (featureode/defaults/default.toml; "
                   "default: that run itself)")
    set_help = ("change a config key after the file, before every check: TABLE.KEY=VALUE, the value a TOML literal "
                "(0.1, true, [\"lazy\", \"agop\"]; other text is a string), e.g. --set network.richness=0.1 "
                "(repeatable; stored in the run's config.json)")

    def add_set(c: argparse.ArgumentParser) -> None:
        c.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE", help=set_help)
    json_help = "print the result as JSON (the keys of theory §6) instead of a table"

    h = add("hermite", cmd_hermite, "Hermite coefficients μ_0..μ_N of an activation")
    h.add_argument("activation", help="registered name (relu, erf, tanh, …) or an expression in u, e.g. 'u*tanh(u)'")
    h.add_argument("--max-degree", type=_count(0, MAX_HERMITE_DEGREE, "the closed forms take ~N² time, the "
                                                   "quadrature ~N² digits of work"), required=True, metavar="N",
                   help="highest degree N ≥ 0 of μ_n. Cost: closed-form activations (relu, abs, erf, gelu, step, "
                   "polynomials) are exact by a Taylor recurrence, ~0.5 s for N = 200; the others (tanh, sigmoid, "
                   "softplus, silu, user expressions) use one 30-digit mpmath quadrature pass for all degrees, ~4 s for "
                   "N = 60 and ~30 s for N = 200 on one core, and refuse a degree whose quadrature misses that "
                   "precision")
    h.add_argument("--bias", type=_real(), default=0.0, metavar="B", help="b in σ(s ξ + b) (default 0)")
    h.add_argument("--scale", type=_real(positive=True), default=1.0, metavar="S",
                   help="s > 0 in σ(s ξ + b) (default 1)")
    h.add_argument("--json", action="store_true", help=json_help)

    d = add("decompose", cmd_decompose, "Hermite modes and coefficients of a target")
    d.add_argument("target", help='e.g. "staircase(3)", "x0^2 + 0.5*x1*x2", "z0*z1 + h2(z0)"')
    d.add_argument("--dim", type=_count(1), required=True, metavar="D", help="input dimension d ≥ 1")
    d.add_argument("--exponent", type=_real(), default=1.5, metavar="A",
                   help="power-law spectrum g_i ∝ (i + O)^(-A), A ≥ 0 (default 1.5)")
    d.add_argument("--offset", type=_real(positive=True), default=3.0, metavar="O",
                   help="offset O > 0 of the power law (default 3)")
    d.add_argument("--no-normalize", action="store_true",
                   help="keep the coefficients as written (default: unit variance, constant reported apart)")
    d.add_argument("--json", action="store_true", help=json_help)

    k = add("kernel", cmd_kernel, "init NTK eigenvalues (exact and HEA) and closure constants of a config")
    k.add_argument("config", nargs="?", default=None, help=config_help)
    add_set(k)
    k.add_argument("--json", action="store_true", help=json_help)
    k.add_argument("--hea-figure", metavar="FILE", help="also plot HEA/exact per level for d = 8, 32, 128 (isotropic "
                   "and the config's power law) with the config's activation and bias_std (.png, .pdf or .svg)")
    figure_options(k, fmt=False)

    dv = add("derive", cmd_derive, "LaTeX of the ODE system of a config: a standalone document, or a fragment")
    dv.add_argument("config", nargs="?", default=None, help=config_help)
    add_set(dv)
    dv.add_argument("--latex", metavar="FILE", help="write the document here (default: print it)")
    dv.add_argument("--fragment", action="store_true",
                    help="the equations alone (a shared block and each variant's differences), to \\input into a "
                         "paper; needs amsmath only, computes no kernel quantity")
    dv.add_argument("--no-labels", action="store_true", help="drop the term names under braces (plain equations)")

    for name, fn, help_ in (("solve", cmd_solve, "integrate the ODE variants of a config"),
                            ("simulate", cmd_simulate, "train the MLP of a config"),
                            ("compare", cmd_compare, "ODE vs MLP on one config: report.json/.md/.png")):
        c = add(name, fn, help_)
        c.add_argument("config", nargs="?", default=None, help=config_help)
        add_set(c)
        c.add_argument("--out", type=_out_dir, required=name != "compare", default="featureode-out", metavar="DIR",
                       help="output folder" + (" (default: featureode-out)" if name == "compare" else ""))
        c.add_argument("--force", action="store_true",
                       help="use DIR even if it holds results of a different config: remove those (and damaged "
                            "result files) and recompute")
        c.add_argument("--quiet", action="store_true", help="no progress bar")
        if name == "simulate":
            c.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint.pt")
        else:
            c.epilog = ("A mean-field variant (meanfield, meanfield+tail, meanfield+whole) keeps its place in "
                        "DIR/checkpoint_VARIANT.npz every five minutes while it runs; the same command on the same "
                        "DIR goes on from it.")
        if name == "compare":
            c.add_argument("--figure-variant", action="append", metavar="NAME",
                           help="ODE variant drawn in the figure's mode and eigenvalue panels (repeatable; default: "
                                "displacement if listed, else the first)")
            figure_options(c)

    from featureode.workflow.grid import suite_names

    def executor_options(c: argparse.ArgumentParser, basis: str | None) -> None:
        c.add_argument("--executor", default="local", metavar="NAME",
                       help="local processes (local, the default), a Dask cluster (dask), or an executor a plugin "
                            "registered")
        c.add_argument("--jobs", type=int, default=1, help="local worker processes, or LocalCluster workers")
        c.add_argument("--scheduler", metavar="ADDRESS", help="attach to a running Dask scheduler (e.g. "
                       "tcp://host:8786) instead of starting a LocalCluster")
        c.add_argument("--basis", choices=BASES, default=basis,
                       help="ODE mode basis (the MLP runs do not depend on it and are reused)")
        c.add_argument("--force", action="store_true", help="accept DIR holding another grid; runs whose config "
                       "changed are recomputed")
        c.add_argument("--quiet", action="store_true", help="no progress bar")
        c.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE",
                       help="change a key of the grid's base config (not an axis), as in compare --set; repeatable")

    v = add("validate", cmd_validate, "run a shipped validation suite (a grid file: ODE vs MLP) as a sweep")
    v.add_argument("suite", nargs="?", choices=suite_names(), help="grid files in featureode/suites/ (with --list "
                   "alone: every suite and its size)")
    v.add_argument("--out", type=_out_dir, metavar="DIR", help="output folder (DIR/runs/CASE per run, results.csv, "
                   "summary.md); needed except with --list")
    executor_options(v, "target")
    v.add_argument("--list", action="store_true", help="print the suite's points, their count and a time estimate "
                   "(the ones already finished in --out DIR if given); without a suite: the suites")

    sw = add("sweep", cmd_sweep, "run every point of a grid file: DIR/results.csv, DIR/summary.md, DIR/runs/")
    sw.add_argument("grid", help="grid file (TOML: base, [set], [grid], [zip], [sweep])")
    sw.add_argument("--out", type=_out_dir, required=True, metavar="DIR", help="output folder (DIR/runs/RUN per run, results.csv, "
                    "summary.md)")
    executor_options(sw, None)
    sw.add_argument("--ode-only", action="store_true", help="the ODE's predictions only (no network trained)")
    sw.add_argument("--list", action="store_true", help="print the points, their count and a time estimate")
    sw.add_argument("--plot", action="store_true", help="also write the natural phase diagrams to DIR/plots/")
    figure_options(sw)
    sw.add_argument("--yes", action="store_true", help="run a grid of more than 10 000 runs")

    pl = add("plot", cmd_plot, "phase diagram of a sweep: heatmap over two keys, line over one")
    pl.add_argument("dir", metavar="DIR", help="a sweep's output folder (or its results.csv)")
    pl.add_argument("--x", required=True, metavar="KEY", help='varied key, e.g. network.richness (zipped keys: '
                    '"target.expr,data.dim")')
    pl.add_argument("--y", metavar="KEY", help="second key: a heatmap")
    pl.add_argument("--metric", default="t10_ratio", help="t10_ratio (default), t50_ratio, log_rms, t50, t10, "
                    "mlp_t50, mlp_t10, t_max; or loss / in_support_loss: the curves, one line per run coloured by "
                    "--x")
    pl.add_argument("--variant", action="append", metavar="NAME",
                    help="ODE variant to draw (repeatable: several are overlaid on one axes in a line plot, one panel "
                         "each in a heatmap; default: one panel per variant)")
    pl.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                    help="keep the rows with KEY = VALUE (for a key not on an axis)")
    pl.add_argument("--out", metavar="FILE", help="default DIR/plots/METRIC.FORMAT")
    figure_options(pl)
    return p


#: The exceptions that are the user's input or environment, not a bug: ``main`` prints their message as one line
#: ``featureode: error: …`` and exits with status 2. Every package error derives from
#: :class:`~featureode.core.errors.FeatureODEError`; the operating system's file errors are the environment's.
USER_ERRORS: tuple[type[BaseException], ...] = (
    FeatureODEError, FileExistsError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: 0 on success; a user error (:data:`USER_ERRORS`) gives ``featureode: error: …`` on stderr and
    exit status 2, an interrupt ``featureode: interrupted…`` and 130 (``--traceback``: re-raise both)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into e.g. `head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:
        if args.traceback:
            raise
        print("featureode: interrupted" + (f": {exc}" if str(exc) else ""), file=sys.stderr)
        return 130
    except UnicodeDecodeError as exc:
        if args.traceback:
            raise
        print(f"featureode: error: a file is not UTF-8 text ({exc.reason} at byte {exc.start}); give a text "
              "(TOML, CSV, JSON) file", file=sys.stderr)
        return 2
    except OSError as exc:   # the file system: EROFS, ENOSPC, EACCES, ENAMETOOLONG, … (not a bug)
        if args.traceback:
            raise
        print(f"featureode: error: {' '.join(_os_error_text(exc).split())}", file=sys.stderr)  # one line
        return 2
    except Exception as exc:
        if args.traceback or not isinstance(exc, USER_ERRORS):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"featureode: error: {text}", file=sys.stderr)
        return 2


def run() -> None:
    """The ``featureode`` script and ``python -m featureode``: :func:`main`, then exit with its status.

    The finished command's objects are frozen out of the garbage collector first: at exit the interpreter would
    otherwise walk SymPy's caches and the compiled modules once more (about 0.3 s of a 2 s ``solve``)."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()
