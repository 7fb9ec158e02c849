"""pytest configuration: the hypothesis profiles.

The ``ci`` profile (derandomized, so a CI run is reproducible) is loaded when the ``CI``
environment variable is set (``.ci/run`` exports CI=1); otherwise ``dev``. Shared helpers
such as ``scenario_dict`` live in tests/helpers.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "dev")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep results folder, made once per module (each case damages its own copy)."""
    from tests.test_bad_input import make_results_folder

    return make_results_folder(tmp_path_factory.mktemp("finished"))
