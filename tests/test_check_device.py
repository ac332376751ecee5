"""``python -m vitbn_nb check-device``: the self-check runs end to end on this CPU, keeps its verdict in the run store
(keyed by device, driver and libraries), catches an engine that is wrong, and an engine it refused is not used: the
runs train with the eager engine and their records say why. ``train`` checks a device with no verdict first."""

import json

import torch

from vitbn_nb import train as train_command
from vitbn_nb.__main__ import main
from vitbn_nb.engines import check_device, stack, training
from vitbn_nb.store import damage, runs

CPU = torch.device("cpu")


def test_the_check_runs_on_this_cpu_prints_one_table_and_keeps_its_verdict(run_store, mnist_ready, capsys):
    assert main(["check-device", "--quick"]) == 0
    printed = capsys.readouterr().out
    for check in (
        "eager run trained twice",
        "stack of 3 = one by one (ViTBNFFN d1)",
        "stack of 3 = one by one (DNNBN_d3)",
        "step time",
    ):
        line = next(line for line in printed.splitlines() if line.startswith(check))
        assert ("pass" in line) or ("info" in line and "stacked" in line), line
    assert printed.count("CUDA only") == 3 and "verdict: every check passed" in printed
    [path] = (run_store / check_device.FOLDER).iterdir()
    verdict = json.loads(path.read_text())
    assert verdict["passed"] and verdict["refused"] == {} and verdict["settings"] == "quick"
    assert verdict["key"] == check_device.device_key(CPU) and verdict["key"]["torch"] == torch.__version__
    assert path == check_device.verdict_path(CPU) and check_device.stored(CPU) == verdict
    assert damage.check_store().empty  # the verdict is no run: `runs check` passes over it


def test_a_wrong_engine_fails_its_check_and_is_not_used(run_store, mnist_ready, monkeypatch, capsys):
    with monkeypatch.context() as patched:  # a stacked step 1 % off: what a broken kernel under vmap would look like
        real = stack.Stack.eager_step
        patched.setattr(stack.Stack, "eager_step", lambda self, x, y: real(self, x, y) * 1.01)
        assert main(["check-device", "--quick"]) == 1
    captured = capsys.readouterr()
    assert "stack of 3 = one by one (ViTBNFFN d1)  FAIL" in captured.out and "a check FAILED" in captured.err
    verdict = check_device.stored(CPU)
    assert not verdict["passed"] and "stack of 3 = one by one" in verdict["refused"]["stacked"]
    assert check_device.refused_engines(CPU) == verdict["refused"]

    stacked = [
        runs.RunConfig(model="DNN_d3", epochs=2, train_size=60, test_size=40, seed=seed, engine="stacked")
        for seed in (0, 1)
    ]
    for run in training.train_all(stacked, progress=False):
        assert run.status == "finished"
        assert all("stack of 3 = one by one" in epoch["engine_fallback"] for epoch in run.record["epochs"])
        assert all("stacked_runs" not in epoch for epoch in run.record["epochs"])  # each trained alone


def test_train_checks_the_device_first_and_once_where_a_gpu_or_a_stack_trains(run_store, monkeypatch):
    checked = []

    def check(device, settings, *, store=None, log=print):
        checked.append(settings.name)
        verdict = {"checked": "now", "settings": settings.name, "passed": True, "refused": {}, "key": {"device": "x"}}
        check_device.atomic.write_json(check_device.verdict_path(CPU, store), verdict)
        return verdict

    monkeypatch.setattr(check_device, "run", check)
    monkeypatch.setattr(training, "train_all", lambda configs, **options: [])
    train_command.train("smoke", ["1"], log=lambda line: None)
    assert checked == []  # eager runs on a CPU: the engine the test suite proves, no check
    monkeypatch.setattr(train_command, "needs_device_check", lambda configs: True)  # a GPU, or a stacked run planned
    train_command.train("smoke", ["1"], log=lambda line: None)
    train_command.train("smoke", ["1"], log=lambda line: None)
    assert checked == ["quick"]  # the smoke profile's quick check, once: then the stored verdict is read
    train_command.train("cpu", ["1"], log=lambda line: None)
    assert checked == ["quick", "full"]  # a real profile wants the full check


def test_a_failed_cuda_only_check_refuses_the_graph_alone_and_a_gpu_without_verdict_is_checked_first(
    run_store, monkeypatch
):
    rows = [
        check_device._row("eager run trained twice", "eager", "pass", "identical"),
        check_device._row("stack of 3 = one by one (ViT d2)", "stacked", "pass", "within"),
        check_device._row("graphed stack = eager stack (ViT d2)", "graphed", "pass", "within"),
        check_device._row("no host sync in the step", "graphed", "FAIL", "a host sync: item()"),
    ]
    monkeypatch.setattr(check_device, "_checks", lambda device, settings: rows)
    verdict = check_device.run(CPU, check_device.QUICK, log=lambda line: None)
    assert not verdict["passed"] and verdict["refused"] == {
        "graphed": "check-device on this device failed: no host sync in the step (a host sync: item())"
    }
    assert "graphed engine not used" in check_device.summary(verdict)

    ensured = []
    monkeypatch.setattr(check_device, "stored", lambda device, store=None: None)
    monkeypatch.setattr(check_device, "ensure", lambda device: ensured.append(device) or verdict)
    assert check_device.refused_engines(CPU) == {} and ensured == []  # a CPU trains with the tested engines
    gpu = torch.device("cuda")
    assert check_device.refused_engines(gpu) == verdict["refused"] and ensured == [gpu]  # a GPU is checked first


def test_a_stack_matches_its_runs_within_rounding_and_an_engine_error_does_not():
    """The loss must agree to 1e-4; accuracy within 0.5 points on the full check's 1,000 test images (near-ties that
    another kernel's rounding flips), never less than one image on the quick check's 60."""
    epochs = lambda loss, acc: [[{"train_loss": loss, "test_acc": acc}]]
    compare = lambda found, settings=check_device.FULL: check_device._compare(
        "c", "stacked", epochs(1.0, 90.0), found, settings
    )
    assert compare(epochs(1.0 + 1e-7, 90.2))["result"] == "pass"  # two images: what an H200 showed
    assert compare(epochs(1.0, 90.6))["result"] == "FAIL"  # six images
    assert compare(epochs(1.001, 90.0))["result"] == "FAIL"  # the loss moved: an engine error
    assert compare(epochs(1.0, 90.0 + 100 / 60), check_device.QUICK)["result"] == "pass"  # one of 60 images
    assert compare(epochs(1.0, 90.0 + 200 / 60), check_device.QUICK)["result"] == "FAIL"
