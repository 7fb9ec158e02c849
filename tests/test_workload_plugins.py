"""Workloads as plug-ins: ``--workload`` finds one by a file path, a module path, or a name a
``HETSIM_PLUGINS`` module or file registered; ``Workload.from_parts`` reads the training set's
size from the data; a model with a BatchNorm layer is refused, naming the layer; and the worked
example of validation/README.md ("Adding a workload") is checked, and run for real on 2 ranks.
(Bad ``--workload`` values and the line each gets: tests/test_bad_input_validation_run.py.)"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import TensorDataset

from hetsim.core.errors import ConfigError
from hetsim.core.registry import PLUGINS_ENV
from tests.refusals import check_refused
from validation.cli import main
from validation.workloads import WORKLOADS, resolve_workload
from validation.workloads.base import Workload

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
EXAMPLE = "examples/my_workload.py:WORKLOAD"

# A workload file: 30 training and 10 held-out samples of 4 features, 3 classes.
TINY = """
import torch
from torch import nn
from validation.workloads import WORKLOADS
from validation.workloads.base import Workload

CALLS = 0

def make_model():
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 3))

def make():
    global CALLS
    CALLS += 1
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    return Workload.from_parts("{name}", make_model, (x[:30], y[:30]), (x[30:], y[30:]), nn.functional.cross_entropy)

WORKLOAD = make()
"""


def tiny(name: str, register: bool = False) -> str:
    return TINY.replace("{name}", name) + ("WORKLOADS.register(WORKLOAD)\n" if register else "")


@pytest.fixture(autouse=True)
def registry_as_it_was():
    """Names a test registers are dropped after it (the built-ins stay)."""
    before = set(WORKLOADS)
    yield
    for name in set(WORKLOADS) - before:
        WORKLOADS.unregister(name)


def parts(model_factory=lambda: nn.Linear(3, 2), n: int = 12) -> Workload:
    x, y = torch.randn(n, 3), torch.arange(n) % 2
    return Workload.from_parts("parts", model_factory, (x, y), (x[:4], y[:4]), nn.functional.cross_entropy)


# ----------------------------------------------------------------------------- finding a workload


def test_a_file_path_and_attribute(tmp_path, monkeypatch):
    (tmp_path / "tiny.py").write_text(tiny("tiny-file"), encoding="utf-8")
    workload = resolve_workload(f"{tmp_path}/tiny.py:WORKLOAD")
    assert (workload.name, workload.train_size()) == ("tiny-file", 30)
    data = workload.load(0, CPU)
    assert data.train_x.shape == (30, 4) and data.test_x.shape == (10, 4) and data.train_y.dtype == torch.int64
    monkeypatch.chdir(tmp_path)
    assert resolve_workload("tiny.py:WORKLOAD") is workload  # relative or absolute: one import of the file
    assert resolve_workload("./tiny.py:make") is not workload  # a factory is another attribute: called once
    assert resolve_workload("./tiny.py:make") is resolve_workload(f"{tmp_path}/tiny.py:make")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.py"]  # no __pycache__ written beside it
    assert "tiny-file" not in WORKLOADS  # a file given by path need not register anything


def test_a_module_path_with_an_object_a_factory_or_a_class(tmp_path, monkeypatch):
    package = f"wl_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / package / "models.py").write_text(tiny("tiny-module"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(f"{package}.models", fromlist=["models"])
    assert resolve_workload(f"{package}.models:WORKLOAD") is module.WORKLOAD
    made = resolve_workload(f"{package}.models:make")
    assert resolve_workload(f"{package}.models:make") is made and module.CALLS == 2  # WORKLOAD's call, then one
    assert (made.name, made.train_size()) == ("tiny-module", 30)
    cnn = resolve_workload("validation.workloads.digits:DigitsCNN")  # a Workload subclass is a factory
    assert (type(cnn).__name__, cnn.name, cnn.train_size()) == ("DigitsCNN", "digits-cnn", 1438)


@pytest.mark.parametrize("form", ["file", "module"])
def test_a_name_a_hetsim_plugins_module_registered(form, tmp_path, monkeypatch, capsys):
    name = f"tiny-{form}-plugin"
    stem = f"wl_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{stem}.py").write_text(tiny(name, register=True), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / f"{stem}.py") if form == "file" else stem)
    workload = resolve_workload(name)
    assert (workload.name, workload.train_size()) == (name, 30)
    assert WORKLOADS[name] is workload
    if form == "file":  # the same file by path is the module HETSIM_PLUGINS imported, not a second import
        assert resolve_workload(f"{tmp_path}/{stem}.py:WORKLOAD") is workload
    # the run's configuration sees it, and its size, before any rank starts
    line = f"--global-batch: 31 is more than the 30 training samples of {name}"
    check_refused(main, ["run", "--workload", name, "--global-batch", "31"], line, tmp_path, capsys, "validation")


# ----------------------------------------------------------------------------- Workload.from_parts


class Items(TorchDataset):
    """A map-style dataset of ``n`` (features, label) items, the label a Python int."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3,), float(i)), i % 2


def test_from_parts_derives_the_training_set_size_from_the_data():
    x, y = torch.randn(50, 3), torch.arange(50) % 2
    loss = nn.functional.cross_entropy
    cases = {
        "pair": ((x, y), 50),
        "tensor-dataset": (TensorDataset(x[:25], y[:25]), 25),
        "dataset": (Items(37), 37),
    }
    for label, (train, n) in cases.items():
        workload = Workload.from_parts(label, lambda: nn.Linear(3, 2), train, Items(5), loss)
        data = workload.load(0, CPU)
        assert (workload.name, workload.train_size(), data.n_train) == (label, n, n)
        assert data.test_x.shape == (5, 3) and data.test_y.tolist() == [0, 1, 0, 1, 0]
        assert torch.equal(data.train_x, workload.load(7, CPU).train_x)  # the same data for every seed
    items = Workload.from_parts("items", lambda: nn.Linear(3, 2), Items(37), Items(5), loss).load(0, CPU)
    assert items.train_x[:, 0].tolist() == [float(i) for i in range(37)]  # in the dataset's order
    assert items.train_y.dtype == torch.int64 and items.train_y.tolist() == [i % 2 for i in range(37)]


BAD_PARTS = [
    ("name", dict(name=""), ValueError, "Workload.from_parts: name must be a non-empty string without ':', got ''"),
    ("name-colon", dict(name="a:b"), ValueError, "name must be a non-empty string without ':', got 'a:b'"),
    ("loss", dict(loss=3), TypeError, "Workload.from_parts: loss must be callable, got an int"),
    ("factory", dict(model_factory=None), TypeError, "model_factory must be callable, got a NoneType"),
    ("list", dict(train=[1, 2, 3]), TypeError,
     "train: a pair (inputs, labels) must hold two tensors, got 3 item(s): int, int, int"),
    ("array", dict(train="data"), TypeError,
     "train: expected a torch.utils.data.Dataset (with a length) or a pair (inputs, labels) of tensors, got a str"),
    ("lengths", dict(train=(torch.zeros(4, 3), torch.zeros(5))), ValueError,
     "train: inputs and labels must have one entry per sample along their first dimension, got shapes (4, 3) and (5,)"),
    ("empty", dict(test=(torch.zeros(0, 3), torch.zeros(0))), ValueError, "Workload.from_parts: test: has no samples"),
    ("empty-dataset", dict(train=Items(0)), ValueError, "Workload.from_parts: train: has no samples"),
    ("not-pairs", dict(train=TensorDataset(torch.zeros(4, 3))), TypeError,
     "train: each item must be an (input, label) pair, got 1 item(s): Tensor collated"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "kind", "message"), [p[1:] for p in BAD_PARTS], ids=[p[0] for p in BAD_PARTS])
def test_from_parts_refuses_malformed_parts(change, kind, message):
    x, y = torch.randn(8, 3), torch.arange(8) % 2
    given = dict(name="bad", model_factory=lambda: nn.Linear(3, 2), train=(x, y), test=(x, y), loss=lambda o, t: o)
    with pytest.raises(kind) as caught:
        Workload.from_parts(**{**given, **change})
    assert message in str(caught.value)


# ----------------------------------------------------------------------------- no BatchNorm

INSTEAD = (
    "whose batch statistics make a rank's gradient depend on how the global batch is cut: use a per-sample "
    "normalisation (torch.nn.GroupNorm, torch.nn.LayerNorm) or weight normalisation "
    "(torch.nn.utils.parametrizations.weight_norm) instead"
)


class Block(nn.Module):
    def __init__(self, norm: type[nn.Module]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, 3, padding=1)
        self.bn1 = norm(3)


class Net(nn.Module):
    """torchvision's names: ``layer1.0.bn1`` is the first block's norm."""

    def __init__(self, norm: type[nn.Module] = nn.BatchNorm2d) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 3, 1)
        self.layer1 = nn.Sequential(Block(norm), Block(norm))


def test_a_batchnorm_model_is_refused_naming_the_layer():
    from validation.workloads.checks import batch_dependent_layers, check_model

    assert batch_dependent_layers(Net()) == [("layer1.0.bn1", "BatchNorm2d"), ("layer1.1.bn1", "BatchNorm2d")]
    with pytest.raises(ConfigError) as caught:
        check_model(parts(Net), "--workload")
    more = "(and 1 more BatchNorm layer(s))"
    assert str(caught.value) == f"--workload: parts: layer1.0.bn1 is a BatchNorm2d {more}, {INSTEAD}"


@pytest.mark.parametrize(
    "layer", [nn.BatchNorm1d(3), nn.BatchNorm3d(3), nn.SyncBatchNorm(3)], ids=lambda m: type(m).__name__
)
def test_every_kind_of_batchnorm_is_refused(layer):
    from validation.workloads.checks import check_model

    with pytest.raises(ConfigError) as caught:
        check_model(parts(lambda: nn.Sequential(nn.Linear(3, 3), layer)), "--workload")
    assert str(caught.value) == f"--workload: parts: 1 is a {type(layer).__name__}, {INSTEAD}"
    with pytest.raises(ConfigError, match=f"^--workload: parts: the model itself is a {type(layer).__name__}, "):
        check_model(parts(lambda: layer), "--workload")


def test_per_sample_normalisations_pass_and_the_check_leaves_torch_s_random_state():
    from validation.workloads.checks import check_model

    workloads = [
        parts(lambda: Net(lambda c: nn.GroupNorm(1, c))),
        parts(lambda: nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))),
        parts(lambda: nn.utils.parametrizations.weight_norm(nn.Linear(3, 2))),
    ]
    torch.manual_seed(5)
    state = torch.get_rng_state()
    for workload in workloads:
        check_model(workload, "--workload")
    assert torch.equal(torch.get_rng_state(), state)


# ----------------------------------------------------------------------------- the README's example


@pytest.mark.slow
def test_the_example_workload(monkeypatch):
    monkeypatch.chdir(ROOT)
    workload = resolve_workload(EXAMPLE)
    data = workload.load(0, CPU)
    model = workload.make_model(0, CPU)
    assert (workload.name, workload.train_size(), data.n_train, int(data.test_y.shape[0])) == (
        "breast-cancer-mlp", 455, 455, 114)  # fmt: skip
    assert sum(p.numel() for p in model.parameters()) == 30 * 64 + 64 + 2 * 64 + 64 * 2 + 2
    assert abs(float(data.train_x.mean())) < 1e-5 and abs(float(data.train_x.std(dim=0).mean()) - 1) < 1e-4

    def grad(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        grads = torch.autograd.grad(workload.loss(model(xs), ys), list(model.parameters()))
        return torch.cat([g.reshape(-1) for g in grads])

    x, y = data.train_x[:8], data.train_y[:8]  # shards of 1, 2 and 5 samples, weighted b_i/B: the union's gradient
    union = grad(x, y)
    combined = sum((b / 8) * grad(x[s : s + b], y[s : s + b]) for s, b in ((0, 1), (1, 2), (3, 5)))
    assert float(union.norm()) > 0 and float((combined - union).norm() / union.norm()) < 1e-5


def test_the_readme_shows_the_example():
    readme = (ROOT / "validation" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Adding a workload") :]
    assert f"--workload {EXAMPLE}" in section and "Workload.from_parts" in section


def test_a_regression_workload_has_a_held_out_loss_and_no_accuracy():
    """Floating-point labels are not classes: the accuracy of an arg-max was 0.000 for every
    policy of a review's regression model; it is nan (null in summary.json), and the run's lines
    and table give the loss instead."""
    from validation.summary_text import held_out

    torch.manual_seed(0)
    x = torch.randn(40, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    train, test = (x[:30], y[:30]), (x[30:], y[30:])
    workload = Workload.from_parts("reg", lambda: nn.Linear(3, 1), train, test, nn.functional.mse_loss)
    model = workload.make_model(0, torch.device("cpu"))
    data = workload.load(0, torch.device("cpu"))
    loss, accuracy = workload.evaluate(model, data, chunk=4)  # chunks of 4 over 10 samples: a mean over samples
    assert math.isnan(accuracy)
    with torch.no_grad():
        assert loss == pytest.approx(float(nn.functional.mse_loss(model(x[30:]), y[30:])), rel=1e-6)
    assert held_out({"final_test_accuracy": None, "final_test_loss": loss}) == f"loss {loss:.4g}"
    assert held_out({"final_test_accuracy": 0.9467, "final_test_loss": 0.2}) == "accuracy 0.947"
    assert held_out({"final_test_accuracy": None, "final_test_loss": None}) == "loss -"
