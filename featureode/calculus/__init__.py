"""Gaussian calculus: Hermite polynomials and derivative means, activations, targets, data spectra, quadrature."""
