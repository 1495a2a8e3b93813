"""Each stage of featureode, inspectable on its own: derive → assemble → read → LaTeX → compile → solve.

Run:  python examples/stages.py [OUT_DIR]        (a few seconds; writes OUT_DIR/stages.tex)

1. derive   the kernel constants of the built-in config (exact λ_β(0), HEA Λ_l, closure constants c_l);
2. assemble the displacement variant as named SymPy terms, and an ablation of it (one line);
3. read     the indexed equations, and the expanded system for the config's two modes;
4. LaTeX    the whole document of the config (pdflatex-ready);
5. compile  the vectorised NumPy code (cached on disk) and
6. solve    with the exact Jacobian.
"""
from __future__ import annotations

import sys
from pathlib import Path

from featureode.ode.compile import compile_system
from featureode.config import load_config
from featureode.kernel.theory import kernel_theory
from featureode.export.latex import derive_document, system_latex
from featureode.ode.solve import solve_variant
from featureode.ode.variants import Variant


def main(out_dir: str | Path = "stages_out") -> dict[str, float | None]:
    cfg = load_config()                                   # staircase(2), d = 16, γ = 0.5, relu
    theory = kernel_theory(cfg)                           # 1. derive
    for m, lam, hea in zip(theory.modes, theory.lambda_exact, theory.lambda_hea):
        print(f"λ_{m}(0) = {lam:.6g} (exact), {hea:.6g} (HEA)")
    print("c_l =", theory.c, " Λ_l =", theory.level_coefficients)

    full = Variant("displacement").system()               # 2. assemble
    ablated = Variant("displacement", ablate=["eigen_growth"]).system()
    for a in full.assignments:                            # 3. read (indexed form)
        print(f"{a.name}[{', '.join(map(str, a.index))}] = {a.expr}")
    expanded = full.expanded(theory.modes, len(theory.g))  # 3. read (expanded, symbolic inputs)
    for state, rhs in zip(expanded.states, expanded.rhs):
        print(f"d{state}/dt = {rhs}")
    print(system_latex(ablated))                          # 4. LaTeX of one system
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stages.tex").write_text(derive_document(cfg, theory))
    print("compiled code:", compile_system(full).path)    # 5. compile
    times = {}
    for variant in (Variant("displacement"), Variant("displacement", ablate=["eigen_growth"])):
        sol = solve_variant(theory, variant, cfg.training.t_max)  # 6. solve
        times[variant.label] = sol.t50
        print(f"{variant.label:32s} t50 = {sol.t50}  t10 = {sol.t10}")
    return times


if __name__ == "__main__":
    main(*sys.argv[1:2])
