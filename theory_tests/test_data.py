"""Covariance spectra, whitening and sampling (theory §1) against hand values and independent samplers."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import sympy as sp
import torch

from featureode.calculus.data import DataError, Spectrum


# ------------------------------------------------------------------------------------------------------------------
# spectra
# ------------------------------------------------------------------------------------------------------------------
def test_power_law_hand_values() -> None:
    """exponent 2, offset 1, d = 3: raw (1, 1/4, 1/9), sum 49/36, so g = (36/49, 9/49, 4/49)."""
    spec = Spectrum.power_law(3, exponent=2, offset=1)
    assert spec.exact == (sp.Rational(36, 49), sp.Rational(9, 49), sp.Rational(4, 49))
    np.testing.assert_allclose(spec.g, [36 / 49, 9 / 49, 4 / 49], rtol=1e-15)


@pytest.mark.parametrize("dim, exponent, offset", [(16, 1.5, 3.0), (8, 0.5, 1.0), (12, 2.25, 0.5), (5, 0.0, 3.0)])
def test_power_law_default_form(dim: int, exponent: float, offset: float) -> None:
    spec = Spectrum.power_law(dim, exponent, offset)
    raw = np.array([(i + offset) ** (-exponent) for i in range(dim)])
    np.testing.assert_allclose(spec.g, raw / raw.sum(), rtol=1e-13)
    assert abs(spec.g.sum() - 1) < 1e-13 and np.all(np.diff(spec.g) <= 0) and spec.dim == dim
    assert spec.exact is not None
    assert abs(sp.N(sp.Add(*spec.exact) - 1, 60)) < 1e-50  # exact numbers, checked at 60 digits
    np.testing.assert_allclose([float(v) for v in spec.exact], spec.g, rtol=1e-14)


@pytest.mark.parametrize("dim, exponent, offset, normalize", [
    (16, 1.5, 3.0, True), (16, 1.5001, 3.0, True), (8, 0.55, 1.7, True), (64, 2.0, 1.0, True),
    (33, 1.0, 2.5, True), (7, 3.3, 0.1, True), (1, 0.8, 4.0, True), (20, 0.0, 3.0, True),
    (12, 1.25, 0.75, False), (40, 2.718, 9.5, False)])
def test_power_law_numbers_equal_the_exact_sympy_values(dim: int, exponent: float, offset: float,
                                                        normalize: bool) -> None:
    """``g`` is computed in NumPy, with no SymPy: it equals the exact SymPy form (rational exponent and offset,
    evaluated at 30 digits) to 1e-12 relative (in practice to the last bit or two), and the exact form is built only
    when it is read. (The exact form reads the offset 0.1 as 1/10, the floats as the double nearest to it: a few
    ulps apart.)"""
    spec = Spectrum._build_power_law(dim, exponent, offset, normalize)  # not the shared cached one
    assert spec.exact_factory is not None  # nothing symbolic built yet
    exact = np.array([float(sp.N(v, 30)) for v in spec.exact])
    assert spec.exact_factory is None and len(spec.exact) == dim
    np.testing.assert_allclose(spec.g, exact, rtol=1e-12, atol=0)
    assert np.max(np.abs(spec.g / exact - 1)) < 2e-15


def test_power_law_defaults_and_unnormalised() -> None:
    spec = Spectrum.power_law(16)
    raw = np.arange(3, 19, dtype=float) ** -1.5
    np.testing.assert_allclose(spec.g, raw / raw.sum(), rtol=1e-13)
    np.testing.assert_allclose(Spectrum.power_law(4, 1, 2, normalize=False).g, [1 / 2, 1 / 3, 1 / 4, 1 / 5])


def test_power_law_beyond_exact_dimension_is_float_only() -> None:
    """d = 100 (above the exact-form limit): the same power law in floats, normalised, no exact form claimed."""
    spec = Spectrum.power_law(100, exponent=1.5, offset=3.0)
    raw = np.array([(i + 3.0) ** -1.5 for i in range(100)])
    np.testing.assert_allclose(spec.g, raw / raw.sum(), rtol=1e-13)
    assert spec.exact is None and abs(spec.g.sum() - 1) < 1e-13
    np.testing.assert_allclose(Spectrum.power_law(100, 1.0, 2.0, normalize=False).g, 1 / np.arange(2.0, 102.0),
                               rtol=1e-15)


def test_from_eigenvalues_keeps_the_users_order_and_exact_values() -> None:
    spec = Spectrum.from_eigenvalues([1, "1/2", "1/4", "1/8"])
    assert spec.exact == (1, sp.Rational(1, 2), sp.Rational(1, 4), sp.Rational(1, 8))
    np.testing.assert_array_equal(spec.g, [1, 0.5, 0.25, 0.125])
    assert Spectrum.from_eigenvalues([0.7, 0.3]).exact is None  # floats are not claimed exact
    assert spec.sqrt_exact(3) == sp.sqrt(2) / 4
    assert float(Spectrum.from_eigenvalues([0.7, 0.3]).sqrt_exact(1)) == pytest.approx(math.sqrt(0.3), rel=1e-15)
    np.testing.assert_array_equal(Spectrum.from_eigenvalues([0.5, 0.5, 0.25]).g, [0.5, 0.5, 0.25])  # ties are fine


@pytest.mark.parametrize("values, message", [
    ([0.1, 0.9], "entry 1 (0.9) > entry 0 (0.1)"), (["1/8", "1/2"], "entry 1 ('1/2') > entry 0 ('1/8')"),
    ([0.5, 0.4, 0.45], "entry 2 (0.45) > entry 1 (0.4)")])
def test_unsorted_eigenvalues_are_refused_not_reordered(values: list, message: str) -> None:
    """Sorting them silently would give x0 another variance than the user wrote (and than covariance = diag(...)
    gives it), so a target written in x would mean something else."""
    with pytest.raises(DataError, match=re.escape(message)):
        Spectrum.from_eigenvalues(values)


def test_eigenvalues_and_diagonal_covariance_give_x_the_same_variances() -> None:
    """[data] eigenvalues = [0.6, 0.3, 0.1] and covariance = diag(0.6, 0.3, 0.1) describe the same x: the target
    x0 + 2 x2 has the variance g_0 + 4 g_2 = 1.0 either way, checked by Monte Carlo on x ~ N(0, diag)."""
    from featureode.config import config_from_dict

    eig = config_from_dict({"data": {"dim": 3, "eigenvalues": [0.6, 0.3, 0.1]},
                            "target": {"expr": "x0 + 2*x2", "normalize": False}})
    cov = config_from_dict({"data": {"dim": 3, "covariance": np.diag([0.6, 0.3, 0.1]).tolist()},
                            "target": {"expr": "x0 + 2*x2", "normalize": False}})
    for cfg in (eig, cov):
        spec, tgt = cfg.spectrum(), cfg.target_obj()
        assert tgt.variance == pytest.approx(0.6 + 4 * 0.1, rel=1e-12)
        x = np.random.default_rng(1).standard_normal((100_000, 3)) * np.sqrt([0.6, 0.3, 0.1])
        xe = x if spec.rotation is None else x @ spec.rotation
        np.testing.assert_allclose(tgt.evaluate(spec.to_z(xe)), x[:, 0] + 2 * x[:, 2], atol=1e-10)
    # a diagonal covariance in ascending order keeps x0 the user's coordinate (variance 0.1); z0 is the top direction
    asc = config_from_dict({"data": {"dim": 2, "covariance": [[0.1, 0.0], [0.0, 0.9]]},
                            "target": {"expr": "x0", "normalize": False}})
    assert asc.spectrum().g.tolist() == [0.9, 0.1]
    assert {str(m): c for m, c in asc.target_obj().as_dict().items()} == {"z1": pytest.approx(math.sqrt(0.1))}


def test_full_covariance_diagonalisation() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 5))
    cov = a @ a.T + 0.1 * np.eye(5)
    spec = Spectrum.from_covariance(cov)
    r = spec.rotation
    assert np.all(np.diff(spec.g) <= 0)
    np.testing.assert_allclose(r.T @ r, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(r @ np.diag(spec.g) @ r.T, cov, atol=1e-11)
    np.testing.assert_allclose(spec.g.sum(), np.trace(cov), rtol=1e-12)


def test_full_covariance_whitening_statistics() -> None:
    """x ~ N(0, Σ) drawn with an independent sampler (Cholesky); z = diag(g)^{-1/2} Rᵀ x must be N(0, I)."""
    cov = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
    spec = Spectrum.from_covariance(cov)
    n = 200_000
    x = np.random.default_rng(11).standard_normal((n, 3)) @ np.linalg.cholesky(cov).T
    z = spec.to_z(x @ spec.rotation)
    # each entry of the sample covariance of N(0, I) has standard error sqrt((1 + δ_ij)/n)
    emp = z.T @ z / n
    se = np.sqrt((1 + np.eye(3)) / n)
    assert np.all(np.abs(emp - np.eye(3)) < 5 * se), emp
    assert np.all(np.abs(z.mean(0)) < 5 / math.sqrt(n))


# ------------------------------------------------------------------------------------------------------------------
# sampling and whitening
# ------------------------------------------------------------------------------------------------------------------
def test_sample_z_seeded_and_standard() -> None:
    spec = Spectrum.power_law(6)
    a, b = spec.sample_z(100_000, seed=5), spec.sample_z(100_000, seed=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, spec.sample_z(100_000, seed=6))
    assert a.shape == (100_000, 6) and a.dtype == np.float64
    n = len(a)
    assert np.all(np.abs(a.mean(0)) < 5 / math.sqrt(n))
    assert np.all(np.abs((a**2).mean(0) - 1) < 5 * math.sqrt(2 / n))


def test_sample_z_torch_seeded() -> None:
    spec = Spectrum.power_law(4)
    a = spec.sample_z_torch(50_000, generator=torch.Generator().manual_seed(2))
    b = spec.sample_z_torch(50_000, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and a.dtype == torch.float32 and a.shape == (50_000, 4)
    c = spec.sample_z_torch(10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert c.dtype == torch.float64
    assert float(a.mean(0).abs().max()) < 5 / math.sqrt(50_000)
    assert float(((a**2).mean(0) - 1).abs().max()) < 5 * math.sqrt(2 / 50_000)


def test_to_x_to_z_inverse_and_variances() -> None:
    spec = Spectrum.from_eigenvalues(["1/2", "1/4", "1/8", "1/8"])
    z = spec.sample_z(200_000, seed=0)
    x = spec.to_x(z)
    np.testing.assert_allclose(x, z * np.sqrt([0.5, 0.25, 0.125, 0.125]), rtol=1e-15)
    np.testing.assert_allclose(spec.to_z(x), z, rtol=1e-14)
    var = (x**2).mean(0)
    assert np.all(np.abs(var - spec.g) < 5 * spec.g * math.sqrt(2 / len(x)))
    assert abs((x**2).sum(1).mean() - 1) < 5 * math.sqrt(2 * (spec.g**2).sum() / len(x))  # E|x|² = Σg = 1
    zt = torch.tensor(z[:50], dtype=torch.float64)
    np.testing.assert_allclose(spec.to_x(zt).numpy(), x[:50], rtol=1e-15)
    np.testing.assert_allclose(spec.to_z(spec.to_x(zt)).numpy(), z[:50], rtol=1e-14)
    assert spec.to_x(zt.float()).dtype == torch.float32


# ------------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, message", [
    ([1.0, 0.0], "(1, 0.0)"), ([0.5, -0.25], "(1, -0.25)"), ([float("nan"), 1.0], "nan"),
    (["a", 1], "(0, 'a')"), ([], "non-empty"), ([1.0, True], "(1, True)"), ([1.0, float("inf")], "(1, inf)"),
    ([0.9, [0.1]], "(1, [0.1])"), ("0.5, 0.5", "a list of numbers")])
def test_bad_eigenvalues_name_the_value(values: list, message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        Spectrum.from_eigenvalues(values)


def test_direct_spectrum_must_be_descending_and_positive() -> None:
    with pytest.raises(DataError, match=re.escape("g_1 = 0.2 > g_0 = 0.1")):
        Spectrum(np.array([0.1, 0.2]))
    with pytest.raises(DataError, match=re.escape("(0, -1.0)")):
        Spectrum(np.array([-1.0]))


@pytest.mark.parametrize("cov, message", [
    ([[1.0, 0.5], [0.4, 1.0]], "Σ[0,1] = 0.5 but Σ[1,0] = 0.4"),
    ([[1.0, 2.0], [2.0, 1.0]], "smallest eigenvalue -1"),
    ([[1.0, 0.0], [0.0, 0.0]], "smallest eigenvalue 0"),
    ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "it has 2 rows but row 0 has 3 entries"),
    ([[1.0, 0.0], [0.0]], "it has 2 rows but row 1 has 1 entries"),
    ([[1.0, "a"], ["a", 1.0]], "(0, 1, 'a')"), ([1.0, 2.0], "row 0 is not a list"), ([], "non-empty"),
    ([[1.0, float("inf")], [float("inf"), 1.0]], "inf"), ([[True, 0], [0, 1]], "(0, 0, True)"),
])
def test_bad_covariance_names_the_value(cov: list, message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        Spectrum.from_covariance(cov)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dim=0), "got 0"), (dict(dim=2.0), "got 2.0"), (dict(dim=3, exponent=-1.0), "got -1.0"),
    (dict(dim=3, offset=0.0), "got 0.0"), (dict(dim=3, offset=-2.0), "got -2.0")])
def test_bad_power_law_names_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        Spectrum.power_law(**kwargs)


@pytest.mark.parametrize("data, message", [
    ({"dim": 3, "covariance": [[1.0, 0.0], [0.0, 1.0]]}, "[data] covariance has size 2 × 2 but dim = 3"),
    ({"dim": 2, "eigenvalues": [0.5, 0.3, 0.2]}, "[data] eigenvalues has 3 entries but dim = 2"),
    ({"dim": 2, "covariance": [[1.0, 0.0], [0.0]]}, "[data] covariance must be a square matrix"),
    ({"dim": 2, "covariance": [[1.0, 2.0], [2.0, 1.0]]}, "[data] covariance is not positive definite"),
    ({"dim": 2, "covariance": [[1.0, 0.5], [0.4, 1.0]]}, "[data] covariance is not symmetric"),
    ({"dim": 2, "eigenvalues": [0.1, 0.9]}, "[data] eigenvalues must be in descending order"),
    ({"dim": 2, "eigenvalues": [0.9, -0.1]}, "[data] eigenvalues must be numbers in [1e-100, 1e+100] (or exact rationals as text, e.g. \"1/3\"); bad entries (index, "
                                             "value): [(1, -0.1)]"),
])
def test_config_data_errors_at_load_name_the_key(data: dict, message: str) -> None:
    """Refused when the config is read (one line naming the key), not when a command first builds the spectrum."""
    from featureode.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        config_from_dict({"data": data, "target": {"expr": "z0"}})
    assert "\n" not in str(err.value)
