"""Determinism decided on purpose: cuBLAS's workspace set on the package's import, the CUDA settings (deterministic
kernels, warnings rather than errors, no NaN fill), and torch's non-determinism warnings recorded in every later
epoch of a run."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

from vitbn_nb import system
from vitbn_nb.data.sets import ImageSet
from vitbn_nb.engines import engine
from vitbn_nb.models import build_model


def test_the_package_sets_the_cublas_workspace_when_imported():
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    script = "import os, vitbn_nb.models; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    found = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == ":4096:8"  # before any CUDA work, whichever module comes first


@pytest.fixture
def restored_determinism():
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    fill = torch.utils.deterministic.fill_uninitialized_memory
    cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32)
    matmul = torch.backends.cuda.matmul.allow_tf32
    system._check_cuda.cache_clear()
    yield
    system._check_cuda.cache_clear()
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.utils.deterministic.fill_uninitialized_memory = fill
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = cudnn
    torch.backends.cuda.matmul.allow_tf32 = matmul


def test_starting_cuda_chooses_deterministic_kernels_warnings_not_errors_and_no_nan_fill(
    monkeypatch, restored_determinism
):
    real_zeros = torch.zeros
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **k: real_zeros(*a, **k))  # "starts" the GPU
    system._check_cuda(None)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_a_nondeterminism_warning_reaches_the_user_and_every_later_epoch_records_it(monkeypatch):
    monkeypatch.setattr(system, "_SEEN", {})
    alert = (
        "scatter_add_cuda_kernel does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue"
    )
    real_step, steps = engine.train_step, []

    def step(*args):
        steps.append(1)
        if len(steps) == 1:
            warnings.warn(alert, UserWarning, stacklevel=1)
            warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
        return real_step(*args)

    monkeypatch.setattr(engine, "train_step", step)
    images = torch.randint(0, 256, (40, 1, 28, 28), dtype=torch.uint8)
    sets = ImageSet(images, torch.randint(0, 10, (40,))), ImageSet(images[:20], torch.randint(0, 10, (20,)))
    with pytest.warns(UserWarning) as caught:
        history = engine.train_model(build_model("DNN_d3"), *sets, epochs=2, lr=1e-3, batch_size=10, progress=False)
    assert {str(w.message) for w in caught} >= {alert, "an unrelated warning"}
    expected = [alert.split(". ")[0]]
    assert [epoch.get("nondeterministic") for epoch in history] == [expected, expected]
