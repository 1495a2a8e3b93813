"""The network at initialization: parametrizations, the init law, exact NTK eigenvalues/Gram/HEA, closure constants."""
