"""Shared test settings: one torch thread, a bounded hypothesis profile, high-precision mpmath oracles."""
from __future__ import annotations

import mpmath
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("featureode", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("featureode")


@pytest.fixture(autouse=True, scope="session")
def _single_thread_torch() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def mp30():
    """mpmath at 30 significant digits for the duration of a test."""
    with mpmath.workdps(30):
        yield
