"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """An in-process local Ray with this machine's 2 CPUs, shut down after the module."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    yield
    ray.shutdown()
