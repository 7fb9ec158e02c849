"""pytest configuration: the hypothesis profiles, the shared finished sweep, slow marks for
files whose owners are still editing them, and the order tests run in (files with long tests first).

The ``ci`` profile (derandomized, so a CI run is reproducible) is loaded when the ``CI``
environment variable is set (``.ci/run`` exports CI=1); otherwise ``dev``. Shared helpers
such as ``scenario_dict`` live in tests/helpers.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# One BLAS and OpenMP thread per process: make test runs two test processes on two cores (and
# many tests start more), so a second thread per library only spins against the other lane:
# OpenBLAS's idle threads cost a hinge-fitting test 55% more CPU for no less wall time. Set
# before numpy or torch loads (no plugin has imported them yet) and inherited by the processes the
# tests start; a value already in the environment wins. validation's ranks set their own threads.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "dev")

# Tests over ~0.4 s of CPU here, in files other engineers are writing (so their marks are set
# here rather than by an edit in the file); they still run in `make test`. Move each mark into
# its file with `@pytest.mark.slow` when that file is next edited, and drop its line here.
SLOW_ELSEWHERE = {
    "test_calibrate.py": {
        "test_calibration_recovers_every_worker_and_the_mean_step_time",  # these three share a
        "test_affine_costs_recovered_within_three_standard_errors",  # 20,000-step simulated run
        "test_affine_winner_writes_the_plain_keys_of_the_maximum_likelihood_line",
        "test_a_backup_trace_recovers_the_slow_workers_cost_within_its_standard_error",
        "test_included_read_from_text_and_numbers",
    },
    "test_calibrate_censored.py": {
        "test_independent_workers_cut_at_the_barrier_share_no_noise",
        "test_cut_rows_with_a_batch_that_varies_are_unbiased",
    },
    "test_calibrate_models.py": {"test_a_split_that_follows_persistent_noise_is_a_warning"},
    # measured beside the suite's other tests, 2026-12 (CPU seconds of the test, its fixtures included)
    "test_gpu_check.py": {"test_the_command_refuses_in_a_fresh_interpreter"},  # a fresh interpreter: 2.8 s
    "test_plots.py": {  # each grid and cell figure drawn to measure its text (1.5 s per module fixture)
        "test_time_to_target_grid_names_its_metric_and_leaves_no_empty_panel",
        "test_the_grid_wraps_into_rows_of_at_most_four_panels",
        "test_lines_differ_in_dash_or_marker_and_the_legend_is_outside_every_panel",
        "test_every_cell_plot_names_its_cell_and_keeps_its_text_inside",
        "test_workers_are_named_not_numbered",
        "test_cdf_lines_differ_in_dash_or_marker_and_legends_sit_outside_the_data",
        "test_gantt_panels_share_one_time_scale_from_zero",
        "test_matrix_plot_log_tick_labels_never_overlap_and_its_diagonal_is_at_45_degrees",  # 0.4-0.55 s
    },
    "test_calibrate_flat.py": {"test_the_affine_terms_of_a_flat_curve_keep_its_fixed_cost_in_every_seed"},  # 0.6 s
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if getattr(item, "originalname", item.name) in SLOW_ELSEWHERE.get(item.path.name, ()):
            item.add_marker(pytest.mark.slow)
    # Long files first: make test's parallel lane hands the tests to its two workers one at a time
    # (--maxschedchunk 1), so the multi-process and slow tests start early and short ones fill the
    # end. A file's tests stay together, in their order (its module fixtures are made once).
    rank = {item.path: 2 for item in items}
    for item in items:
        mark = item.get_closest_marker
        here = 0 if mark("multiprocess") and not mark("serial") else 1 if mark("slow") else 2
        rank[item.path] = min(rank[item.path], here)
    items.sort(key=lambda item: rank[item.path])


@pytest.fixture(scope="session")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep results folder, made once per test process (each case damages its own copy)."""
    from tests.refusals import make_results_folder

    return make_results_folder(tmp_path_factory.mktemp("finished"))


@pytest.fixture(scope="session", autouse=True)
def children_write_temporary_files_here(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The processes the tests start keep their temporary files in this session's temporary folder,
    which pytest clears, not in /tmp: torchrun leaves an empty ``torchelastic_*`` log folder in
    ``$TMPDIR`` for every job it runs, hundreds over a few test runs."""
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmpdir"))
