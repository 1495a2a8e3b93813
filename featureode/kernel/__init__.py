"""The network at initialization: parametrizations, the init law, exact NTK eigenvalues/Gram/HEA, closure constants;
and the exact population loss of any two-layer network on Gaussian data (``population``)."""
