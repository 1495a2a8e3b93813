"""The exact multi-driver mean-field flow on the extended basis, against the network: a diagnostic, not a closure.

``escape_oracle.py`` follows a degree-3 target's own mode along its own per-neuron flow (one driver). Its one-mode
flow comes out *early* against the network (t10 ratio 0.51–0.65), so the question this script answers is whether the
other modes' residuals, which pull the growing neurons back, account for the difference. It integrates the
infinite-width gradient flow of the init neurons projected on the ODE's extended basis ``B`` (the modes the package's
extended-basis ODE carries), every mode driving at once:

    dθ_i/dt = γ P ∇_θ (a_i Σ_{α∈B} R_α(t) A_α(ŵ_i, b_i)),     R_α = v_α − f_α,
    f_α(t) = E_i[a_i A_α(θ_i(t)) − a_i A_α(θ_i(0))] / γ,

with ``θ = (a, ŵ, b)``, ``P = diag(1, g, 1)`` and the projections ``A_α = ŵ^α m_{|α|}(b, |ŵ|)/sqrt(α!)``, their
gradients by ``∂_b m_k = m_{k+1}``, ``∂_{ŵ_i} m_k = ŵ_i m_{k+2}`` (ReLU: the closed-form Stein means of the test
oracle, ``theory_tests/_per_neuron.py``; erf, gelu, …: the package's closed forms; the others: the package's
quadrature rule on a table of ``(b, |ŵ|)``, splined, :class:`MeanTable`). Its kernel ``K_βα(t) = E[⟨P^{1/2}∇φ_β, P^{1/2}∇φ_α⟩]`` is
the package's Gram at t = 0 (checked below against ``kernel_theory``'s exact quadrature, within the sample's
standard error), and ``df/dt = K(t) R`` holds along the flow by construction; nothing is expanded or resummed, so
this is the exact flow of the extended-basis system, up to (a) the ``--n`` sampled neurons (one seed) and (b) the
truncation of the residual to ``B``. The loss is ``Σ_α R_α²/Σ_α v_α²``; its t50/t10 are compared with the stored
MLP crossings (seed means) and with the package's ``rational`` ODE on the same basis. RK4 in t with the step
``min(h_max, c/λ_max(K))`` (``λ_max`` recomputed every 10 steps); ``--check`` reruns a case at half the step.

Run:  python docs/validation/multidriver_oracle.py [--n 4000] [--cases 0,1,...] [--check] [--md FILE]
      python docs/validation/multidriver_oracle.py --suite wide --h-max 2 --max-steps 3000   (every case of a suite,
      with the ±10% / ±20% counts of the oracle and of ``rational``; ``docs/validation/multidriver_oracle.md``)
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Callable
from pathlib import Path

import numpy as np
from scipy.interpolate import RectBivariateSpline
from scipy.special import ndtr

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from escape_oracle import mlp_times  # noqa: E402
from featureode.calculus.activations import get_activation  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.workflow.grid import load_grid, probe_config, suite_path  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import rk4_step  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402

#: (suite, activation, target, d, exponent, offset, γ, σ_b, N): 0–6 the escape oracle's ReLU degree-3 cases and a
#: degree-2 control; 7–13 the smooth-activation cases of wide and wide2 with a trained t10 (degree 2)
CASES = [
    ("wide", "relu", "z0*z1", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "relu", "h3(z0)", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "relu", "h2(z0)*z1", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "relu", "z0*z1*z2", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide2", "relu", "h3(z0)", 24, 1.25, 2.0, 0.7, 0.25, 512),
    ("wide2", "relu", "h2(z0)*z1", 24, 1.25, 2.0, 0.7, 0.25, 512),
    ("wide2", "relu", "z0*z1*z2", 24, 1.25, 2.0, 0.7, 0.25, 512),
    ("wide", "erf", "z0*z1", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "tanh", "z0*z1", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "tanh", "h2(z0)", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide", "gelu", "z0*z1", 16, 1.5, 3.0, 0.5, 0.5, 1024),
    ("wide2", "tanh", "z0*z1", 24, 1.25, 2.0, 0.2, 0.75, 512),
    ("wide2", "softplus", "z0*z1", 24, 1.25, 2.0, 0.2, 0.25, 512),
    ("wide2", "silu", "z0*z1", 24, 1.25, 2.0, 0.2, 0.25, 512),
]


class MeanTable:
    """``m_k(b, s)`` of an activation without a closed-form mean: the package's rule (``Activation.mean_numpy``) on
    a grid ``b ∈ [−8, 8]`` (241 points) × ``s ∈ [0.05, 10]`` (200 points, log-spaced: trained neurons grow), computed
    once per order, then a bicubic spline. A neuron outside the grid, or a table value that is not finite, is an
    error, not an extrapolation."""

    B = np.linspace(-8.0, 8.0, 241)
    S = np.geomspace(0.05, 10.0, 200)

    @classmethod
    def span(cls, b_max: float, s_max: float) -> None:
        """Let the table reach ``|b| ≤ b_max`` and ``|ŵ| ≤ s_max`` at the default grid's spacing (30 points per unit
        of b, 199 steps per factor 200 of |ŵ|); ``span(8, 10)`` is the default grid itself."""
        cls.B = np.linspace(-b_max, b_max, int(round(30 * b_max)) + 1)
        cls.S = np.geomspace(0.05, s_max, int(round(199 * math.log(s_max / 0.05) / math.log(200))) + 1)

    def __init__(self, act) -> None:
        self.act = act
        self._splines: dict = {}

    def __call__(self, k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
        spline = self._splines.get(k)
        if spline is None:
            bb, ss = np.meshgrid(self.B, self.S, indexing="ij")
            with np.errstate(all="ignore"):
                vals = self.act.mean_numpy(k)(bb.ravel(), ss.ravel()).reshape(bb.shape)
            if not np.all(np.isfinite(vals)):
                raise SystemExit(f"m_{k} of {self.act.name} is not finite on the table (the package's rule overflows "
                                 "at large |w|); narrow MeanTable.S")
            spline = self._splines[k] = RectBivariateSpline(self.B, self.S, vals, kx=3, ky=3)
        if b.min() < self.B[0] or b.max() > self.B[-1] or s.min() < self.S[0] or s.max() > self.S[-1]:
            raise SystemExit(f"a neuron left the table of m_k (b in [{b.min():.3g}, {b.max():.3g}], |w| in "
                             f"[{s.min():.3g}, {s.max():.3g}]); widen MeanTable.B / MeanTable.S")
        return spline.ev(b, s)


def relu_mean(k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """ReLU's ``m_k(b, s) = E_z[σ^{(k)}(b + s z)]`` in closed form (the Stein means of ``theory_tests/_per_neuron.py``):
    ``m_0 = b Φ(x) + s φ(x)``, ``m_1 = Φ(x)``, ``m_k = (−1)^k He_{k−2}(x) φ(x)/s^{k−1}`` with ``x = b/s``."""
    x = b / s
    phi = np.exp(-x**2 / 2) / math.sqrt(2 * math.pi)
    if k == 0:
        return b * ndtr(x) + s * phi
    if k == 1:
        return ndtr(x)
    he = [np.ones_like(x), x]
    for n in range(2, k - 1):
        he.append(x * he[-1] - (n - 1) * he[-2])
    return (-1) ** k * he[k - 2] * phi / s ** (k - 1)


class Modes:
    """The projections ``A_α(ŵ, b) = ŵ^α m_{|α|}(b, |ŵ|)/sqrt(α!)`` of a list of modes and their gradients, all at
    once, from the three rules ``∂_b m_k = m_{k+1}``, ``∂_{ŵ_i} m_k = ŵ_i m_{k+2}`` and the monomial's own derivative.
    ReLU: the closed form of :func:`relu_mean`; any other activation: the package's ``m_k``
    (``Activation.mean_numpy``, a closed form or Gauss–Hermite quadrature)."""

    def __init__(self, modes: list, activation: str) -> None:
        self.modes = modes
        self.orders = sorted({m.degree + j for m in modes for j in (0, 1, 2)})
        if activation == "relu":
            self._mean = relu_mean
        else:
            act = get_activation(activation)
            if act.mean0 is not None or act.kinks:   # a closed form (erf, gelu, …), or a kink: the package's m_k
                self._mean = lambda k, b, s: act.mean_numpy(k)(b, s)
            else:                                    # no closed form: the package's composite rule (~0.1 ms a
                self._mean = MeanTable(act)          # point) tabulated once, splined

    def _parts(self, W: np.ndarray, b: np.ndarray) -> tuple[dict, list]:
        s = np.sqrt((W**2).sum(1))
        m = {k: self._mean(k, b, s) for k in self.orders}
        mono = []
        for mode in self.modes:
            fact = math.sqrt(math.prod(math.factorial(n) for _, n in mode.items))
            val = np.ones(W.shape[0]) / fact
            grads = {}
            for i, n in mode.items:
                rest = np.ones(W.shape[0]) / fact
                for j, e in mode.items:
                    rest = rest * (W[:, j] ** e if j != i else n * W[:, j] ** (e - 1))
                grads[i] = rest
                val = val * W[:, i] ** n
            mono.append((val, grads))
        return m, mono

    def A(self, W: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``(n, M)``: every mode's projection for every neuron."""
        m, mono = self._parts(W, b)
        return np.stack([val * m[mode.degree] for mode, (val, _) in zip(self.modes, mono)], 1)

    def with_gradients(self, W: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``A (n, M)``, ``∂A/∂ŵ (n, M, d)`` and ``∂A/∂b (n, M)``."""
        m, mono = self._parts(W, b)
        n, d = W.shape
        A, dW, db = np.empty((n, len(self.modes))), np.empty((n, len(self.modes), d)), np.empty((n, len(self.modes)))
        for k, (mode, (val, grads)) in enumerate(zip(self.modes, mono)):
            q = mode.degree
            A[:, k] = val * m[q]
            db[:, k] = val * m[q + 1]
            dW[:, k, :] = (val * m[q + 2])[:, None] * W
            for i, gi in grads.items():
                dW[:, k, i] += gi * m[q]
        return A, dW, db


class Flow:
    """The coupled flow of the module docstring for ``n`` init neurons (seeded)."""

    def __init__(self, g: np.ndarray, modes: list, v: np.ndarray, gamma: float, bias_std: float, n: int,
                 activation: str = "relu", seed: int = 3) -> None:
        rng = np.random.default_rng(seed)
        self.g = np.asarray(g, dtype=float)
        self.basis = Modes(modes, activation)
        self.v = np.asarray(v, dtype=float)
        self.gamma = float(gamma)
        d = self.g.size
        self.theta = (rng.standard_normal(n), rng.standard_normal((n, d)) * np.sqrt(self.g),
                      bias_std * rng.standard_normal(n))
        a0, W0, b0 = self.theta
        self.phi0 = (a0[:, None] * self.basis.A(W0, b0)).mean(0)

    def f(self, theta: tuple) -> np.ndarray:
        a, W, b = theta
        return ((a[:, None] * self.basis.A(W, b)).mean(0) - self.phi0) / self.gamma

    def velocity(self, theta: tuple) -> tuple[np.ndarray, ...]:
        """``γ P ∇_θ (a Σ_α R_α A_α)`` per neuron."""
        a, W, b = theta
        A, dW, db = self.basis.with_gradients(W, b)
        R = self.v - ((a[:, None] * A).mean(0) - self.phi0) / self.gamma
        return (self.gamma * (A @ R), self.gamma * a[:, None] * np.einsum("nkd,k->nd", dW, R) * self.g,
                self.gamma * a * (db @ R))

    def gram(self, theta: tuple) -> np.ndarray:
        """``K_βα = E[⟨P^{1/2}∇φ_β, P^{1/2}∇φ_α⟩]``."""
        u = self._u(theta)
        return np.einsum("nip,njp->ij", u, u) / u.shape[0]

    def _u(self, theta: tuple) -> np.ndarray:
        a, W, b = theta
        A, dW, db = self.basis.with_gradients(W, b)
        return np.concatenate([A[:, :, None], a[:, None, None] * np.sqrt(self.g) * dW, (a[:, None] * db)[:, :, None]],
                              2)                                   # (n, M, d + 2)

    def gram_samples(self, theta: tuple) -> np.ndarray:
        """Per neuron ``⟨u_β, u_α⟩`` (for a standard error)."""
        u = self._u(theta)
        return np.einsum("nip,njp->nij", u, u)

    def step(self, theta: tuple, h: float) -> tuple:
        """One RK4 step of length ``h`` from ``theta`` (the package's :func:`featureode.ode.meanfield.rk4_step`)."""
        return rk4_step(self.velocity, theta, h)

    def run(self, t_max: float, h_max: float = 1.0, c: float = 0.5, every: int = 10, max_steps: int = 10**9,
            on_step: "Callable[[float, tuple], None] | None" = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Loss ratio ``Σ R²/Σ v²`` on the steps' times until t_max (or until it falls below 0.05, or
        ``max_steps``); ``on_step(t, θ)`` is called after each step."""
        theta, t, steps = self.theta, 0.0, 0
        ts, loss = [0.0], [1.0]
        norm = float((self.v**2).sum())
        h = h_max
        while t < t_max and loss[-1] > 0.05 and steps < max_steps:
            if steps % every == 0:
                lam = float(np.linalg.eigvalsh(self.gram(theta)).max())
                h = min(h_max, c / lam, t_max - t)
            theta = self.step(theta, h)
            t += h
            steps += 1
            if on_step is not None:
                on_step(t, theta)
            R = self.v - self.f(theta)
            ts.append(t)
            loss.append(float((R**2).sum()) / norm)
            if not math.isfinite(loss[-1]):
                raise SystemExit(f"the oracle's flow became non-finite at t = {t:.4g}; lower the step (c)")
        return np.array(ts), np.array(loss), steps


def crossing(t: np.ndarray, loss: np.ndarray, level: float) -> float:
    """First time the loss ratio reaches ``level`` (interpolated in log loss), NaN if never."""
    below = np.flatnonzero(loss <= level)
    if not below.size:
        return math.nan
    i = int(below[0])
    y0, y1 = math.log(loss[i - 1]), math.log(loss[i])
    return float(t[i - 1] + (math.log(level) - y0) / (y1 - y0) * (t[i] - t[i - 1]))


def fmt(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.2f}"


def suite_cases(name: str) -> list[tuple]:
    """The cases of a shipped validation suite (``featureode/suites/NAME.toml``) in :data:`CASES`' layout."""
    grid = load_grid(suite_path(name))
    out = []
    for point in grid.points():
        cfg = probe_config(grid.raw_config(point, 0), name)
        net, data = cfg.network, cfg.data
        out.append((name, str(net.activation), str(cfg.target.expr), int(data.dim), float(data.exponent),
                    float(data.offset), float(net.richness), float(net.bias_std), int(net.width)))
    return out


def suite_parser(description: str, suites: tuple[str, ...] = ("wide", "wide2"),
                 suite_required: bool = True) -> argparse.ArgumentParser:
    """The arguments every per-suite script takes: ``--suite`` (one of ``suites``; optional for a script that has
    another mode), ``--cases`` and ``--md``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--suite", choices=list(suites), required=suite_required)
    p.add_argument("--cases", default="", help="comma-separated case numbers (0-based); default every case")
    p.add_argument("--md", type=Path, help="write the Markdown table here (default: print it)")
    return p


def picked_cases(args: argparse.Namespace) -> list[tuple[int, tuple]]:
    """``(number, case)`` of the cases ``--cases`` picks from ``--suite`` (every case by default)."""
    cases = suite_cases(args.suite)
    picked = [int(x) for x in args.cases.split(",")] if args.cases else range(len(cases))
    return [(i, cases[i]) for i in picked]


def stored_horizon(times: "list[tuple[float, float]]") -> float:
    """How far a flow runs against stored MLP ``(t50, t10)`` pairs: 3× the latest t10 (6× the t50 where a run has
    no t10)."""
    return 3.0 * max(t10 if math.isfinite(t10) else 2 * t50 for t50, t10 in times)


#: the base values of each suite (a case's label names only what differs from them, and always d, γ, σ_b, N)
BASES = {"wide": (1.5, 3.0), "wide2": (1.25, 2.0), "standard": (1.5, 3.0)}


def case_label(suite: str, act: str, target: str, d: int, expo: float, off: float, gamma: float, sb: float,
               width: int) -> str:
    parts = [] if act == "relu" else [act]
    parts += [target, f"d={d}"]
    base_expo, base_off = BASES[suite]
    if not math.isclose(expo, base_expo):
        parts.append(f"exponent {expo:g}")
    if not math.isclose(off, base_off):
        parts.append(f"offset {off:g}")
    parts += [f"γ={gamma:g}", f"σ_b={sb:g}", f"N={width}"]
    return f"{suite}: " + ", ".join(parts)


def case_config(case: tuple, basis: str = "extended"):
    """The package's config of a case (:data:`CASES`' layout) on ``basis``."""
    _, act, target, d, expo, off, gamma, sb, width = case
    return load_config().replace(target={"expr": target},
                                 network={"activation": act, "richness": gamma, "bias_std": sb, "width": width},
                                 data={"dim": d, "exponent": expo, "offset": off}, ode={"basis": basis})


def ratio(x: float, m: float) -> float:
    return x / m if math.isfinite(x) and math.isfinite(m) else math.nan


def seed_mean(ratios: "list[list[float]]") -> tuple[float, float]:
    """The seed mean of per-seed ``[t50, t10]`` ratios; NaN where any seed's is (a level a flow never reached
    counts outside the band, never as the other seeds' mean)."""
    if not ratios:
        return math.nan, math.nan
    return tuple(float(np.mean(x)) for x in zip(*ratios))  # type: ignore[return-value]


def within(pair: tuple[float, float], tol: float) -> bool:
    return all(math.isfinite(r) and abs(r - 1) <= tol for r in pair)


def emit(text: str, md: "Path | None") -> None:
    """Print a script's Markdown ``text``, and write it to ``md`` when given."""
    if md:
        md.write_text(text)
    print(text)


def write_report(head: list[str], rows: list[list[str]], md: "Path | None", scores: "dict | None" = None,
                 counted: str = "the network crossed both levels") -> None:
    """Print the Markdown table ``head``/``rows`` and, with ``scores`` (name → list of (t50, t10) ratio pairs, all of
    one length), the counts within ±10% / ±20% on both; also write it to ``md`` when given."""
    text = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    n = len(next(iter(scores.values()))) if scores else 0
    if scores and n:
        text += ["", f"Cases where {counted}: {n}. Within ±10% / ±20% on both t50 and t10:"]
        for name, pairs in scores.items():
            text.append(f"- {name}: {sum(within(x, 0.1) for x in pairs)}/{n} / {sum(within(x, 0.2) for x in pairs)}/{n}")
    emit("\n".join(text) + "\n", md)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4000, help="sampled init neurons per case")
    p.add_argument("--cases", default="", help="comma-separated case numbers (0-based) to run; default all")
    p.add_argument("--suite", choices=["wide", "wide2"], help="run every case of this suite instead of CASES")
    p.add_argument("--check", action="store_true", help="also rerun each case at half the step size")
    p.add_argument("--basis", default="extended", choices=["extended", "target"])
    p.add_argument("--h-max", type=float, default=1.0, help="largest RK4 step (the step is min(h_max, 0.5/λ_max))")
    p.add_argument("--max-steps", type=int, default=5000, help="stop a case after this many RK4 steps")
    p.add_argument("--md", type=Path, help="write the Markdown table here (default: print it)")
    p.add_argument("--b-max", type=float, default=8.0,
                   help="the table of m_k (activations without closed-form means) spans b in [-B, B] at the same "
                        "spacing (default 8, as in the committed tables)")
    p.add_argument("--s-max", type=float, default=10.0,
                   help="... and |ŵ| in [0.05, S] at the same log-spacing (default 10, as in the committed tables)")
    args = p.parse_args()
    if not (args.b_max > 0 and args.s_max > 0.05):
        p.error(f"--b-max must be > 0 and --s-max > 0.05 (the table starts at |ŵ| = 0.05), got {args.b_max:g} and "
                f"{args.s_max:g}")
    MeanTable.span(args.b_max, args.s_max)
    start = time.time()
    rows: list[list[str]] = []
    scores: dict[str, list] = {"oracle": [], "rational": []}
    cases = suite_cases(args.suite) if args.suite else CASES
    picked = [cases[int(i)] for i in args.cases.split(",")] if args.cases else cases
    flows: dict[tuple, tuple] = {}    # the oracle does not depend on the width: one run per width-free config
    for suite, act, target, d, expo, off, gamma, sb, width in picked:
        label = case_label(suite, act, target, d, expo, off, gamma, sb, width)
        try:
            m50, m10 = mlp_times(suite, target, d, expo, off, gamma, sb, width, act)
        except SystemExit as exc:
            print(f"{label}: skipped ({exc})", file=sys.stderr, flush=True)
            continue
        if not math.isfinite(m50):
            print(f"{label}: skipped (the network never reached t50)", file=sys.stderr, flush=True)
            continue
        cfg = case_config((suite, act, target, d, expo, off, gamma, sb, width), args.basis)
        theory = kernel_theory(cfg, with_gram=True)
        modes = list(theory.modes)
        v = np.asarray(theory.target, float)
        t_max = 3.0 * (m10 if math.isfinite(m10) else 2 * m50)
        key = (act, target, d, expo, off, gamma, sb, t_max)
        if key not in flows:
            try:
                flow = Flow(np.asarray(theory.g, float), modes, v, gamma, sb, args.n, act)
                Ks = flow.gram_samples(flow.theta)
                K0, se = Ks.mean(0), Ks.std(0) / math.sqrt(args.n)
                z = np.abs(K0 - np.asarray(theory.gram, float)) / np.maximum(se, 1e-300)
                worst = float(np.max(z[se > 0])) if np.any(se > 0) else 0.0
                del Ks
                c0 = time.process_time()
                ts, loss, steps = flow.run(t_max, h_max=args.h_max, max_steps=args.max_steps)
                cpu = time.process_time() - c0
                t50, t10 = crossing(ts, loss, 0.5), crossing(ts, loss, 0.1)
                half = ""
                if args.check:
                    f2 = Flow(np.asarray(theory.g, float), modes, v, gamma, sb, args.n, act)
                    ts2, loss2, _ = f2.run(t_max, h_max=args.h_max / 2, c=0.25, max_steps=2 * args.max_steps)
                    half = (f" (half step: {fmt(ratio(crossing(ts2, loss2, 0.5), m50))} / "
                            f"{fmt(ratio(crossing(ts2, loss2, 0.1), m10))})")
                cost = f"{steps} steps, {cpu:.0f} s" + (" (step limit)" if steps >= args.max_steps else "")
            except SystemExit as exc:
                t50 = t10 = math.nan
                worst, half, cost = math.nan, "", f"failed: {exc}"
            flows[key] = (worst, t50, t10, half, cost)
        worst, t50, t10, half, cost = flows[key]
        rat = solve_variant(theory, "rational", t_max, basis=args.basis)
        oracle_r = (ratio(t50, m50), ratio(t10, m10))
        rat_r = (ratio(rat.t50 or math.nan, m50), ratio(rat.t10 or math.nan, m10))
        if math.isfinite(m10):
            scores["oracle"].append(oracle_r)
            scores["rational"].append(rat_r)
        r = [label, str(len(modes)), f"{worst:.1f}", f"{fmt(m50)} / {fmt(m10)}",
             f"{fmt(oracle_r[0])} / {fmt(oracle_r[1])}{half}", f"{fmt(rat_r[0])} / {fmt(rat_r[1])}", cost]
        rows.append(r)
        print(" | ".join(r), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    head = ["case", "modes", "max |K(0) − exact| / s.e.", "MLP t50 / t10",
            f"exact multi-driver flow ({args.basis} basis) t50 / t10 ratio", "rational t50 / t10 ratio", "cost"]
    write_report(head, rows, args.md, scores if args.suite else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
