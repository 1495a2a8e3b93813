"""Shared test settings: one torch thread and a bounded hypothesis profile (the machine has 2 shared cores)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("featureode", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("featureode")


@pytest.fixture(autouse=True, scope="session")
def _single_thread_torch() -> None:
    import torch

    torch.set_num_threads(1)
