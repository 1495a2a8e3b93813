"""Fidelity of the closures' eigenvalue laws to the exact per-neuron mean-field flow, one driving mode at a time.

For a driving mode α and a mode β the growth of the init kernel's eigenvalue along the mean-field flow
``dθ/dε = P∇φ_α`` (``ε = γ D_α``; θ = (a, ŵ, b), ``P = diag(1, g, 1)``) is ``ρ_β(ε) = E[k_β(θ(ε))] / E[k_β(θ_0)]``.
An independent oracle (``theory_tests/_per_neuron.py``, the one the tests use) computes it: RK4 of the per-neuron
flow on sampled init neurons (a ~ N(0, 1), ŵ_i ~ N(0, g_i), b ~ N(0, σ_b²); d = 3, g = (0.25, 0.15, 0.1), σ_b = 0.5), gradients by autograd, projections
``A_β = E_z[h_β(z) σ(ŵ·z + b)]`` by a tensor Gauss–Hermite rule in z for erf, tanh and the linear activation, and by
the closed-form Stein means of ReLU (``m_1 = Φ(b/s)``, ``m_k = (−1)^k He_{k−2}(b/s) φ(b/s)/s^{k−1}``, s = |ŵ|) —
no derivative-mean table, no growth algebra. Mean ± standard error of the ratio (delta method). Beside it, the laws
built from the deterministic constants U, V, T of :mod:`featureode.kernel.second_order` (S = U + V):

  truncated     1 + S ε²                          (the exact second order; negative once S < 0 and ε is large)
  second_order  (1 + ½Vε²)² + Uε²                 (SECOND_ORDER_GROWTH: the square of the truncated gradient,
                                                   projected)
  resummed      (1 + V c)² + U s²                 (RESUMMED_GROWTH; s = sinh κε/κ, c = (cosh κε − 1)/κ², κ² = S_αα/2)
  resummed+T    1 + 2Vc + U s² + T c²             (the full square |u_0 + s u_1 + c u_2|²: exact for a linear network)
  second+T      1 + Sε² + ¼Tε⁴                    (the full square of the truncated gradient)
  rational_UV   (1 + (U + V⁺)ε²) / (1 + V⁻ε²)
  rational      (1 + S⁺ε²) / (1 + S⁻ε²)           (RATIONAL_GROWTH; S^± = max(±S, 0))

T diverges for ReLU in d = 3 (the +T laws are then blank). Not a test: it measures which law the exact flow
supports, one driving mode at a time (the closures' other approximations — several drivers, the kernel's eigenvectors
fixed, finite width — are not in it).

Run:  python docs/validation/law_fidelity.py [--n 3000] [--acts relu erf tanh] [--md docs/validation/law_fidelity.md]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "theory_tests"))   # the oracle the tests use
from _per_neuron import PerNeuron, init_neurons  # noqa: E402
from featureode.calculus.hermite import Mode  # noqa: E402
from featureode.kernel.second_order import second_order_constants  # noqa: E402

G3 = np.array([0.25, 0.15, 0.1])
SB = 0.5


def laws(U: float, V: float, T: float, Saa: float, eps: np.ndarray) -> dict[str, np.ndarray]:
    S = U + V
    kap = math.sqrt(max(Saa, 1e-30) / 2)
    s, c = np.sinh(kap * eps) / kap, (np.cosh(kap * eps) - 1) / kap**2
    return {"truncated": 1 + S * eps**2, "second_order": (1 + 0.5 * V * eps**2) ** 2 + U * eps**2,
            "resummed": (1 + V * c) ** 2 + U * s**2, "resummed+T": 1 + 2 * V * c + U * s**2 + T * c**2,
            "second+T": 1 + (U + V) * eps**2 + 0.25 * T * eps**4,
            "rational_UV": (1 + (U + max(V, 0)) * eps**2) / (1 + max(-V, 0) * eps**2),
            "rational": (1 + max(S, 0) * eps**2) / (1 + max(-S, 0) * eps**2)}


NAMES = ["truncated", "second_order", "resummed", "resummed+T", "second+T", "rational_UV", "rational"]
PAIRS = [("z0", "z0"), ("z0", "z1"), ("z0", "z0*z1"), ("z0*z1", "z0*z1"), ("z0*z1", "z0"), ("h2(z0)", "h2(z0)"),
         ("z0", "h3(z0)"), ("h2(z0)", "h2(z1)"), ("h3(z0)", "z0")]
#: self-driven modes of degree 3, followed to large γD (ReLU): the shrinking branch (S < 0) of the laws
LARGE = [("h3(z0)", "h3(z0)"), ("h2(z0)*z1", "h2(z0)*z1"), ("z0*z1*z2", "z0*z1*z2")]
LARGE_EPS = [1.0, 3.0, 6.0, 10.0]


def ratio_and_se(k: np.ndarray, k0: np.ndarray) -> tuple[float, float]:
    """``mean(k)/mean(k0)`` and its delta-method standard error (the same neurons in both)."""
    r = k.mean() / k0.mean()
    cov = np.cov(np.stack([k, k0]))
    return float(r), math.sqrt(max(cov[0, 0] - 2 * r * cov[0, 1] + r * r * cov[1, 1], 0) / k.size) / k0.mean()


def study(act: str, n: int, eps: np.ndarray, seed: int = 7, pairs: "list[tuple[str, str]] | None" = None
          ) -> list[dict]:
    theta0 = init_neurons(n, G3, SB, seed)
    nr = PerNeuron(G3, act)
    rows = []
    # a linear network has no degree-2 or -3 features (their eigenvalue is 0): only level-1 pairs
    pairs = [p for p in (pairs or PAIRS) if act != "u" or all(Mode.parse(m).degree == 1 for m in p)]
    for al, be in pairs:
        a, b = Mode.parse(al), Mode.parse(be)
        ms = [a, b] if a != b else [a]
        row = 0 if a == b else 1
        try:
            so = second_order_constants(ms, G3, act, SB, drivers=[0], quartic=True)
            T = float(so.T[row, 0, 0])
        except Exception:   # T diverges (ReLU, d = 3): the +T laws are not defined
            so = second_order_constants(ms, G3, act, SB, drivers=[0])
            T = float("nan")
        U, V = float(so.U[row, 0, 0]), float(so.V[row, 0])
        pred = laws(U, V, T, float(so.S[0, 0]), eps)
        k0 = nr.kernel(b, *theta0).numpy()
        for j, e in enumerate(eps):
            th = nr.integrate(a, theta0, float(e), steps=max(8, int(12 * e)))
            r, se = ratio_and_se(nr.kernel(b, *th).numpy(), k0)
            rows.append({"act": act, "driver": al, "mode": be, "eps": float(e), "exact": r, "se": se, "U": U,
                         "V": V, **{nm: float(pred[nm][j]) for nm in NAMES}})
            print(f"{act} {al} -> {be} eps={e:g}: exact {r:.3f} ± {se:.3f}; "
                  + ", ".join(f"{nm} {pred[nm][j]:.3f}" for nm in NAMES), flush=True)
    return rows


def markdown(rows: list[dict], header: str) -> str:
    out = [header, "", "| σ | driver α | mode β | U | V | ε | exact (± s.e.) | " + " | ".join(NAMES) + " |",
           "|---|---|---|---|---|---|---|" + "---|" * len(NAMES)]
    for r in rows:
        cells = ["—" if not math.isfinite(r[nm]) else f"{r[nm]:.3f}" for nm in NAMES]
        out.append(f"| {r['act']} | {r['driver']} | {r['mode']} | {r['U']:.3f} | {r['V']:.3f} | {r['eps']:g} | "
                   f"{r['exact']:.3f} ± {r['se']:.3f} | " + " | ".join(cells) + " |")
    out += ["", "Mean and largest |log(law/exact)| over the rows (a blank law is left out):", "",
            "| σ | " + " | ".join(NAMES) + " |", "|---|" + "---|" * len(NAMES)]
    for act in list(dict.fromkeys(r["act"] for r in rows)) + ["all"]:
        sel = [r for r in rows if act in ("all", r["act"])]
        cells = []
        for nm in NAMES:
            x = np.array([abs(math.log(max(r[nm], 1e-12) / r["exact"])) for r in sel if math.isfinite(r[nm])])
            cells.append("—" if not x.size else f"{x.mean():.3f} / {x.max():.2f}")
        out.append(f"| {act} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000, help="sampled neurons for erf/tanh/linear (ReLU: 20 000)")
    ap.add_argument("--acts", nargs="+", default=["relu", "erf", "tanh", "u"])
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1.0, 2.0, 3.0])
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--pairs", nargs="+", default=None, help="driver:mode pairs (default: the built-in list)")
    ap.add_argument("--relu-n", type=int, default=20_000)
    args = ap.parse_args()
    t0 = time.time()
    rows: list[dict] = []
    for act in args.acts:
        pairs = [tuple(p.split(":")) for p in args.pairs] if args.pairs else None
        rows += study(act, args.relu_n if act == "relu" else args.n, np.array(args.eps), pairs=pairs)
    large = [] if args.pairs else study("relu", 5000, np.array(LARGE_EPS), pairs=LARGE)
    header = (f"Made by `python docs/validation/law_fidelity.py` ({args.n} sampled neurons for erf/tanh/linear, "
              f"{args.relu_n} for ReLU, seed 7; {time.time() - t0:.0f} s). Exact = RK4 of the per-neuron mean-field "
              "flow; laws from the deterministic U, V, T (module docstring of the script).")
    text = markdown(rows, "# Eigenvalue laws against the exact per-neuron flow\n\n" + header)
    if large:
        text += "\n" + markdown(large, "## Self-driven degree-3 modes to large γD (ReLU, 5000 neurons)")
    print(text)
    if args.md:
        args.md.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
