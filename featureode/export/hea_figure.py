"""The HEA-against-exact figure of the init NTK eigenvalues (``featureode kernel --hea-figure``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.export.style import label, new_figure, save_figure, styled
from featureode.kernel.theory import compare_exact_hea


def exact_vs_hea_figure(path: "str | Path | None" = None, activation: str = "relu", bias_std: float = 0.5,
                        dims: Sequence[int] = (8, 32, 128), exponent: float = 1.5, offset: float = 3.0,
                        max_level: int = 3, *, figsize: tuple[float, float] | None = None, ax: Any = None,
                        style: "str | Mapping[str, Any] | None" = None, fmt: str | None = None) -> dict[str, Any]:
    """Exact ``λ_β(0)`` against HEA ``Λ_{|β|} g^β`` per level and dimension; returns the plotted data (``dims``,
    ``panels``: ratio HEA/exact per mode and dimension) with the figure under ``"figure"``, and writes it to
    ``path`` when given (PNG, PDF or SVG by ``fmt`` or the suffix).

    Modes per level ``l``: the product ``z0*…*z_{l−1}`` (solid) and the pure power ``h_l(z0)`` (dashed). Left:
    isotropic data (``g_i = 1/d``): for products HEA becomes exact as ``d`` grows; pure powers keep an O(1) error,
    because ``h_l(z0)`` overlaps with ``(|x|² − 1)·h_{l−2}(z0)`` and the radial dependence of Θ contributes at the
    same order ``d^{−l}`` as ``Λ_l g^β``. Right: the power-law spectrum ``g_i ∝ (i + offset)^(−exponent)``, whose
    effective dimension stays finite, so ``|x|²`` keeps fluctuating and HEA overestimates levels ≥ 2 at every d.
    ``figsize``, ``ax`` (two axes) and ``style`` as for :func:`featureode.export.report.report_figure`.
    """
    levels = range(1, max_level + 1)
    data: dict[str, Any] = {"dims": list(dims), "activation": activation, "bias_std": bias_std, "panels": {}}
    with styled(style) as st:
        if ax is None:
            fig = new_figure(figsize or st.size((10, 4), aspect=0.42 if st.name != "column" else 1.5))
            axes = list(fig.subplots(2, 1, sharex=True) if st.name == "column" else fig.subplots(1, 2, sharey=True))
            own = True
        else:
            axes, own = list(ax), False
            fig = axes[0].figure
        for a, (name, make) in zip(axes, [
                ("isotropic", lambda d: Spectrum.power_law(d, 0.0, 1.0)),
                (f"power law $(i+{offset:g})^{{-{exponent:g}}}$", lambda d: Spectrum.power_law(d, exponent, offset))]):
            panel: dict[str, list[float]] = {}
            for level in levels:
                for mode, ls in ((Mode.from_dict({i: 1 for i in range(level)}), "-"),
                                 (Mode.from_dict({0: level}), "--")):
                    if level == 1 and ls == "--":
                        continue
                    ratios = [math.nan if r["hea_over_exact"] is None else r["hea_over_exact"] for d in dims
                              for r in compare_exact_hea([mode], make(d), activation, bias_std)]
                    panel[str(mode)] = ratios
                    a.plot(dims, ratios, ls, marker="o", color=f"C{level - 1}", label=f"{mode} (level {level})")
            data["panels"]["isotropic" if name == "isotropic" else f"power law (i+{offset:g})^-{exponent:g}"] = panel
            a.axhline(1.0, color="k", lw=0.8)
            a.set_xscale("log", base=2)
            a.set_xticks(list(dims), [str(d) for d in dims])
            a.set_xlabel("dimension " + label("data.dim"))
            a.set_title(name)
            a.grid(alpha=0.3)
        axes[0].set_ylabel(label("hea_over_exact"))
        axes[0].legend(fontsize=8)
        if own:
            if not st.compact:
                fig.suptitle(f"HEA vs exact infinite-width NTK eigenvalues at init ({activation}, "
                             f"$\\sigma_b = {bias_std:g}$)")
            fig.tight_layout()
        if path is not None:
            save_figure(fig, path, fmt, style)
    data["figure"] = fig
    return data
