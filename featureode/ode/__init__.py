"""The feature ODE: named SymPy terms, variants and closures, code generation, integrators, solve, replay."""
