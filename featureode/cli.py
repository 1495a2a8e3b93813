"""Command-line interface ``featureode`` (DESIGN §6).

Subcommands: ``hermite``, ``decompose``, ``kernel``, ``derive``, ``solve``, ``simulate``, ``compare``, ``validate``.
Bad input ends with a one-line ``featureode: error: …`` on stderr and exit status 2 (``--traceback`` shows the
Python traceback instead).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence


def _print_json(obj: Any) -> None:
    from .compare import json_default

    print(json.dumps(obj, indent=2, default=json_default))


# ----------------------------------------------------------------------------------------------------------------
# foundation commands
# ----------------------------------------------------------------------------------------------------------------
def cmd_hermite(args: argparse.Namespace) -> int:
    """``featureode hermite``: ``μ_n = E[σ(s ξ + b) h_n(ξ)]``, ``n = 0 … max_degree``, of an activation."""
    from .activations import get_activation

    act = get_activation(args.activation)
    if args.max_degree < 0:
        raise ValueError(f"--max-degree must be a non-negative integer, got {args.max_degree}")
    if args.scale < 0:
        raise ValueError(f"--scale must be ≥ 0, got {args.scale}")
    coeffs = [act.hermite(n, args.bias, args.scale) for n in range(args.max_degree + 1)]
    if args.json:
        _print_json({"activation": act.name, "bias": args.bias, "scale": args.scale,
                     "coefficients": [c.value for c in coeffs], "exact": [c.latex for c in coeffs]})
        return 0
    how = "exact (SymPy closed form)" if act.is_exact else f"mpmath quadrature at {act.precision} digits"
    print(f"Hermite coefficients μ_n = E[σ(s ξ + b) h_n(ξ)] of {act.name} ({act.description}), "
          f"b = {args.bias}, s = {args.scale}; {how}")
    print(f"{'n':>3}  {'μ_n':>24}  exact")
    for n, c in enumerate(coeffs):
        print(f"{n:>3}  {c.value:>24.16g}  {c.exact if c.exact is not None else '—'}")
    return 0


def cmd_decompose(args: argparse.Namespace) -> int:
    """``featureode decompose``: modes ``α`` and coefficients ``v_α`` of ``f* = Σ_α v_α h_α(z)``."""
    import sympy as sp

    from .data import Spectrum
    from .targets import parse_target

    spec = Spectrum.power_law(args.dim, args.exponent, args.offset)
    tgt = parse_target(args.target, spec, normalize=not args.no_normalize)
    rows = [{"mode": str(m), "index": {str(i): n for i, n in m.items}, "coefficient": float(v),
             "exact": str(e), "latex": sp.latex(e)} for m, v, e in zip(tgt.modes, tgt.coefficients, tgt.exact)]
    if args.json:
        _print_json({"target": args.target, "dim": args.dim, "normalized": not args.no_normalize,
                     "constant": tgt.constant, "modes": rows})
        return 0
    print(f"f*(x) = {args.target}   (d = {args.dim}, {spec.description})")
    print("normalised to unit variance (constant term reported separately)" if not args.no_normalize
          else "coefficients as written")
    width = max([len(r["mode"]) for r in rows] + [4])
    print(f"{'mode':<{width}}  {'v_α':>22}  exact")
    for r in rows:
        exact = r["exact"] if len(r["exact"]) <= 60 else "(long closed form; see --json)"
        print(f"{r['mode']:<{width}}  {r['coefficient']:>22.16g}  {exact}")
    if not args.no_normalize:
        print(f"constant term (not a mode of the normalised target): {tgt.constant:.16g}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# config-driven commands
# ----------------------------------------------------------------------------------------------------------------
def _config(path: str | None) -> Any:
    from .config import load_config

    return load_config(path)


def _config_for_out(args: argparse.Namespace) -> Any:
    """The config of ``args.config``, with ``args.out`` created and stamped for it (refused if it holds results of
    another config, unless ``args.force``)."""
    from .compare import guard_output_dir

    cfg = _config(args.config)
    guard_output_dir(Path(args.out), cfg, force=args.force)
    return cfg


def cmd_kernel(args: argparse.Namespace) -> int:
    """``featureode kernel``: exact and HEA ``λ_β(0)`` of the target's modes, ``Λ_l`` and ``c_l``."""
    from .kernel import kernel_report

    cfg = _config(args.config)
    rep = kernel_report(cfg)
    if args.hea_figure:
        from .kernel import exact_vs_hea_figure

        exact_vs_hea_figure(args.hea_figure, cfg.network.activation, cfg.network.bias_std,
                            exponent=cfg.data.exponent, offset=cfg.data.offset)
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
    from .latex import derive_document

    text = derive_document(_config(args.config))
    if args.latex:
        Path(args.latex).parent.mkdir(parents=True, exist_ok=True)
        Path(args.latex).write_text(text)
        print(f"wrote {args.latex}")
    else:
        print(text)
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    """``featureode solve``: integrate every ODE variant; writes ``DIR/ode.json``."""
    from .solve import solve_config

    res = solve_config(_config_for_out(args), args.out)
    for name, tr in res.variants.items():
        print(f"{name:<24} t50 = {_fmt(tr.t50)}   t10 = {_fmt(tr.t10)}")
    print(f"wrote {Path(args.out) / 'ode.json'}")
    for error in res.errors.values():
        print(f"featureode: error: {error}", file=sys.stderr)
    return 1 if res.errors else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """``featureode simulate``: train the reference MLP; writes ``DIR/mlp.json``."""
    from .mlp import simulate_config

    res = simulate_config(_config_for_out(args), args.out, resume=args.resume, progress=not args.quiet)
    print(f"MLP: t50 = {_fmt(res.get('t50'))}   t10 = {_fmt(res.get('t10'))}")
    print(f"wrote {Path(args.out) / 'mlp.json'}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``featureode compare``: ODE vs MLP; writes ``DIR/report.*``."""
    from .compare import compare_config

    compare_config(_config_for_out(args), args.out, progress=not args.quiet)
    print(Path(args.out, "report.md").read_text())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``featureode validate``: run a named suite; writes ``DIR/summary.*``."""
    from .compare import run_suite

    run_suite(args.suite, args.out, jobs=args.jobs, progress=not args.quiet, force=args.force, basis=args.basis)
    print(Path(args.out, "summary.md").read_text())
    return 0


def _fmt(x: Any) -> str:
    return "not reached" if x is None else f"{x:.4g}"


# ----------------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (DESIGN §6)."""
    p = argparse.ArgumentParser(prog="featureode", description=__doc__.split("\n")[0])
    p.add_argument("--traceback", action="store_true", help="show Python tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        sp_ = sub.add_parser(name, help=help, description=help)
        sp_.set_defaults(func=fn)
        return sp_

    h = add("hermite", cmd_hermite, "Hermite coefficients μ_0..μ_N of an activation")
    h.add_argument("activation", help="registered name (relu, erf, tanh, …) or an expression in u")
    h.add_argument("--max-degree", type=int, required=True)
    h.add_argument("--bias", type=float, default=0.0, help="b in σ(s ξ + b)")
    h.add_argument("--scale", type=float, default=1.0, help="s in σ(s ξ + b)")
    h.add_argument("--json", action="store_true")

    d = add("decompose", cmd_decompose, "Hermite modes and coefficients of a target")
    d.add_argument("target", help='e.g. "staircase(3)", "x0^2 + 0.5*x1*x2", "z0*z1 + h2(z0)"')
    d.add_argument("--dim", type=int, required=True)
    d.add_argument("--exponent", type=float, default=1.5)
    d.add_argument("--offset", type=float, default=3.0)
    d.add_argument("--no-normalize", action="store_true", help="keep the coefficients as written")
    d.add_argument("--json", action="store_true")

    k = add("kernel", cmd_kernel, "init NTK eigenvalues (exact and HEA) and closure constants of a config")
    k.add_argument("config", nargs="?", default=None, help="TOML config (default: the built-in example)")
    k.add_argument("--json", action="store_true")
    k.add_argument("--hea-figure", metavar="PNG", help="also plot HEA/exact per level for d = 8, 32, 128 (isotropic "
                   "and the config's power law) with the config's activation and bias_std")

    dv = add("derive", cmd_derive, "standalone LaTeX document of the ODE system of a config")
    dv.add_argument("config", nargs="?", default=None)
    dv.add_argument("--latex", metavar="FILE", help="write the document here (default: print)")

    for name, fn, help_ in (("solve", cmd_solve, "integrate the ODE variants of a config"),
                            ("simulate", cmd_simulate, "train the MLP of a config"),
                            ("compare", cmd_compare, "ODE vs MLP on one config: report.json/.md/.png")):
        c = add(name, fn, help_)
        c.add_argument("config", nargs="?", default=None, help="TOML config (default: the built-in example)")
        c.add_argument("--out", required=name != "compare", default="featureode-out", metavar="DIR")
        c.add_argument("--force", action="store_true", help="overwrite results of a different config in DIR")
        if name != "solve":
            c.add_argument("--quiet", action="store_true", help="no progress bar")
        if name == "simulate":
            c.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint.pt")

    v = add("validate", cmd_validate, "run a named validation suite (ODE vs MLP on a grid)")
    from .compare import SUITES

    v.add_argument("suite", choices=sorted(SUITES), help="; ".join(f"{k}: {SUITES[k]['description']}"
                                                                   for k in sorted(SUITES)))
    v.add_argument("--out", required=True, metavar="DIR")
    v.add_argument("--jobs", type=int, default=1, help="parallel local processes")
    v.add_argument("--basis", choices=("target", "extended"), default="target",
                   help="ODE mode basis (the MLP runs do not depend on it and are reused with --force)")
    v.add_argument("--force", action="store_true")
    v.add_argument("--quiet", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; bad input gives ``featureode: error: …`` on stderr and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into e.g. `head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("featureode: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileExistsError, FileNotFoundError, RuntimeError) as exc:
        if args.traceback:
            raise
        print(f"featureode: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
