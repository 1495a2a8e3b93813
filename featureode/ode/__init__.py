"""The feature ODE: named SymPy terms (and the mean-field flow's equations), variants and closures, code generation,
integrators, solve, replay."""
