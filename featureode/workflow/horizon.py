"""The sweep horizon ``training.t_max = "auto"``: ``min(cap, factor × t10 of the lazy kernel flow, 4 × t10 of
displacement)``."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from featureode.config import Config

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.kernel.theory import KernelTheory


# ----------------------------------------------------------------------------------------------------------------
# the horizon t_max = "auto"
# ----------------------------------------------------------------------------------------------------------------
def lazy_t10(theory: KernelTheory) -> float:
    """``t10`` of the lazy kernel flow with exact ``λ(0)`` of a :class:`~featureode.kernel.theory.KernelTheory`: the root of
    ``Σ v_β² e^{−2λ_β t} = 0.1 Σ v_β²``, by bisection."""
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


def auto_t_max(cfg: Config, factor: float = 2.0, cap: float = math.inf) -> float:
    """The horizon ``min(cap, factor × t10_lazy, 4 × t10_displacement)`` of ``cfg``, to 4 significant digits.

    The lazy kernel flow with exact ``λ(0)`` bounds the learning time from above in the rich regime; the second
    bound keeps rich runs, whose kernel (and so the number of SGD steps per unit time) grows by 10–100×, from
    spending most of their steps after the target is learnt. It is a choice of horizon only: no constant of the ODE depends on
    it, and an MLP slower than 4× the prediction shows up as a missing ``t10``, not as a shorter curve. Both bounds
    use the target basis, so the MLP runs are the same whatever ODE basis is compared."""
    from featureode.kernel.theory import kernel_theory
    from featureode.ode.solve import solve_variant

    theory = kernel_theory(cfg, basis="target")
    t_max = min(cap, factor * lazy_t10(theory))
    # the horizon's own solver settings, not the config's [ode] ones: the MLP runs must not depend on ODE settings
    t10 = solve_variant(theory, "displacement", t_max, "exact", method="rodas4", rtol=1e-8, atol=1e-10,
                        n_points=200, t_min=1e-2).t10
    if t10 is not None:
        t_max = min(t_max, 4 * t10)
    return float(f"{t_max:.4g}")




