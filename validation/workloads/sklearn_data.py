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
    path = shipped_file("digits.csv.gz")
    if path is None:
        from sklearn.datasets import load_digits as load

        return load(return_X_y=True)
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


def load_breast_cancer() -> Arrays:
    """The 569 tumours of the Wisconsin breast cancer data: 30 measurements each (float64) and
    the label (0 malignant, 1 benign). The file's first line holds the counts and class names."""
    path = shipped_file("breast_cancer.csv")
    if path is None:
        from sklearn.datasets import load_breast_cancer as load

        return load(return_X_y=True)
    data = np.loadtxt(path, delimiter=",", skiprows=1)
    return data[:, :-1], data[:, -1].astype(int)
