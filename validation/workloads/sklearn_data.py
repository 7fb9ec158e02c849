"""Datasets that ship inside scikit-learn, read from its files without importing scikit-learn.

Importing ``sklearn.datasets`` (scipy's statistics among it) costs a process about as much
start-up as torch itself, and every rank of a run imports its workload. These loaders read the
same files the way scikit-learn's ``load_digits`` and ``load_breast_cancer`` read them, and give
the same arrays (``return_X_y=True``); a scikit-learn that keeps its files elsewhere is asked
through its own loader. tests/test_workloads.py checks both ways against scikit-learn's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

Arrays = tuple[np.ndarray, np.ndarray]


def shipped_file(name: str) -> Path | None:
    """scikit-learn's ``datasets/data/NAME``, found without importing the package (None when
    scikit-learn is missing or keeps its data elsewhere)."""
    package = importlib.util.find_spec("sklearn")
    locations = list(package.submodule_search_locations or ()) if package is not None else []
    found = [Path(p) / "datasets" / "data" / name for p in locations]
    return found[0] if found and found[0].is_file() else None


def load_digits() -> Arrays:
    """The 1797 handwritten 8x8 digits: pixels (1797, 64) in 0..16 as float64, labels 0-9."""
    return _load("digits.csv.gz", "load_digits")


def load_breast_cancer() -> Arrays:
    """The 569 tumours of the Wisconsin breast cancer data: 30 measurements each (float64) and
    the label (0 malignant, 1 benign)."""
    return _load("breast_cancer.csv", "load_breast_cancer", header_rows=1)  # counts and class names


def _load(name: str, loader: str, header_rows: int = 0) -> Arrays:
    """The features and integer labels (the last column) of the shipped file ``name``, or what
    scikit-learn's ``loader`` returns when the file is not where it is looked for."""
    path = shipped_file(name)
    if path is None:
        import sklearn.datasets

        return getattr(sklearn.datasets, loader)(return_X_y=True)
    data = np.loadtxt(path, delimiter=",", skiprows=header_rows)
    return data[:, :-1], data[:, -1].astype(int)
