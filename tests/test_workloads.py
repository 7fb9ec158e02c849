"""validation's workloads, each in one process: the registry's sizes, seeded data and weights,
the property the trainer's gradient combination rests on (shard gradients weighted by b_i/B
add up to the union's gradient, whatever the split), and each model's own checks."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from validation.workloads import BUILTIN_WORKLOADS, WORKLOADS, load_workload
from validation.workloads.base import Dataset, Workload
from validation.workloads.transformer import VOCAB, T

CPU = torch.device("cpu")
NAMES = sorted(BUILTIN_WORKLOADS)


@functools.cache
def data(name: str, seed: int) -> Dataset:
    return load_workload(name).load(seed, CPU)


def flat_grad(workload: Workload, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(workload.loss(model(x), y), params)
    return torch.cat([g.reshape(-1) for g in grads])


def test_the_registry_holds_the_built_ins_in_order():
    assert [name for name in WORKLOADS if name in BUILTIN_WORKLOADS] == list(BUILTIN_WORKLOADS)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_size_the_configuration_checks_is_the_loaded_training_set(name):
    d = data(name, 0)
    assert WORKLOADS[name].train_size() == d.n_train == d.train_x.shape[0] == {"transformer": 2048}.get(name, 1438)
    assert WORKLOADS[name].train_size() == data(name, 1).n_train  # the same for every seed
    assert d.test_x.shape[0] == d.test_y.shape[0] > 0
    assert load_workload(name) is WORKLOADS[name] and WORKLOADS[name].name == name


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_data_and_weights_other_seed_other_split(name):
    workload = load_workload(name)
    a, b = data(name, 0), workload.load(0, CPU)
    for field in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert not torch.equal(a.train_x, data(name, 1).train_x)
    first, second = workload.make_model(3, CPU).state_dict(), workload.make_model(3, CPU).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = workload.make_model(4, CPU).state_dict()
    assert not all(torch.equal(first[k], other[k]) for k in first)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_weighted_shard_gradients_are_the_union_gradient(name):
    workload, d = load_workload(name), data(name, 0)
    model = workload.make_model(0, CPU)
    torch.manual_seed(1)
    with torch.no_grad():  # a generic point: at initialisation some gradients are zero (zero-init residuals)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    x, y = d.train_x[:8], d.train_y[:8]
    union = flat_grad(workload, model, x, y)
    combined = torch.zeros_like(union)
    start = 0
    for b in (1, 2, 5):  # uneven, with a shard of a single sample
        combined += (b / 8) * flat_grad(workload, model, x[start : start + b], y[start : start + b])
        start += b
    assert float(union.norm()) > 0
    assert float((combined - union).norm() / union.norm()) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_evaluate_gives_a_finite_loss_and_an_accuracy(name):
    workload, d = load_workload(name), data(name, 0)
    small = Dataset(d.train_x[:4], d.train_y[:4], d.test_x[:20], d.test_y[:20])
    loss, accuracy = workload.evaluate(workload.make_model(0, CPU), small, chunk=8)
    assert math.isfinite(loss) and loss > 0
    assert 0.0 <= accuracy <= 1.0


@pytest.mark.slow
def test_resnet18_has_torchvision_s_parameter_count_and_images():
    model = load_workload("resnet18").make_model(0, CPU)
    assert sum(p.numel() for p in model.parameters()) == 11_181_642  # torchvision's resnet18(num_classes=10)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    d = data("resnet18", 0)
    assert d.train_x.shape == (1438, 3, 32, 32) and d.train_x.dtype == torch.float32
    assert torch.equal(d.train_x[:, 0], d.train_x[:, 2])  # grey on three channels
    assert abs(float(d.train_x.mean())) < 1e-4 and abs(float(d.train_x.std()) - 1) < 1e-4
    assert model(d.train_x[:2]).shape == (2, 10)


def test_resnet18_matches_torchvision_module_for_module():
    try:
        from torchvision.models import resnet18
    except Exception as exc:  # not installed, or a CUDA build that does not load against CPU torch
        pytest.skip(f"torchvision unusable here: {exc!r}"[:200])
    torch.manual_seed(0)
    norm = functools.partial(torch.nn.GroupNorm, 32)
    reference = resnet18(num_classes=10, zero_init_residual=True, norm_layer=norm).state_dict()
    ours = load_workload("resnet18").make_model(0, CPU).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in reference.items()}
    for key in ours:  # the same initialisation (the same random draws, in the same order)
        assert torch.equal(ours[key], reference[key]), key


def test_transformer_samples_are_next_byte_targets():
    d = data("transformer", 0)
    assert d.train_x.shape == d.train_y.shape == (2048, T) and d.train_x.dtype == torch.int64
    assert d.test_x.shape == (512, T)
    assert torch.equal(d.train_x[:, 1:], d.train_y[:, :-1])
    assert 0 <= int(d.train_x.min()) and int(d.train_x.max()) < VOCAB


def test_transformer_text_too_short_is_an_error(monkeypatch):
    from validation.workloads import transformer

    monkeypatch.setattr(transformer, "corpus", lambda: b"x" * 1000)
    with pytest.raises(RuntimeError, match="fewer than 2560"):
        transformer.byte_split(0)


def test_transformer_initial_loss_is_near_uniform():
    workload, d = load_workload("transformer"), data("transformer", 0)
    with torch.no_grad():
        loss = float(workload.loss(workload.make_model(0, CPU)(d.train_x[:64]), d.train_y[:64]))
    assert abs(loss - math.log(VOCAB)) < 0.1 * math.log(VOCAB)


def test_transformer_is_causal():
    model = load_workload("transformer").make_model(0, CPU)
    x = data("transformer", 0).train_x[:2].clone()
    t = 40
    changed = x.clone()
    changed[:, t] = (changed[:, t] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(x), model(changed)
    assert before.shape == (2, T, VOCAB)
    assert torch.allclose(before[:, :t], after[:, :t], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, t:], after[:, t:], atol=1e-4, rtol=0)


@pytest.mark.slow  # imports scikit-learn (about 2 s)
@pytest.mark.parametrize("name", ["load_digits", "load_breast_cancer"])
def test_shipped_datasets_are_read_from_scikit_learns_files_exactly_as_it_loads_them(monkeypatch, name):
    import sklearn.datasets

    from validation.workloads import digits, sklearn_data

    shipped_x, shipped_y = getattr(sklearn.datasets, name)(return_X_y=True)
    for how in ("file", "scikit-learn's loader"):
        if how != "file":  # a scikit-learn that keeps its data elsewhere
            monkeypatch.setattr(sklearn_data.importlib.util, "find_spec", lambda name: None)
        x, y = getattr(sklearn_data, name)()
        assert x.dtype == shipped_x.dtype and y.dtype == shipped_y.dtype, how
        assert x.tolist() == shipped_x.tolist() and y.tolist() == shipped_y.tolist(), how
    assert digits.digits_split(0)[0].shape == (digits.N_DIGITS - digits.N_TEST, 8, 8)
