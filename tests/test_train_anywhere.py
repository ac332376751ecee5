"""Train anywhere, render anywhere: the device is chosen out loud, checkpoints are written by time, runs trained on
another device type are reused, measurements are kept with the runs, and footers name every machine involved."""

import dataclasses
import types

import pytest
import torch

from vitbn_nb import atomic, limits, system
from vitbn_nb.engines import training
from vitbn_nb.publishing import figures
from vitbn_nb.store import records, run_folder, runs
from vitbn_nb.store.records import write_record

TINY = dict(model="DNN_d3", epochs=3, train_size=40, test_size=20)


def test_a_gpu_that_cannot_be_used_is_an_error_not_a_cpu_run(monkeypatch):
    monkeypatch.delenv("VITBN_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(system, "_gpu_present", lambda: "/dev/nvidia0")
    with pytest.raises(system.DeviceError, match=r"NVIDIA GPU \(/dev/nvidia0 exists\).*VITBN_DEVICE=cpu"):
        system.pick_device()
    monkeypatch.setenv("VITBN_DEVICE", "cpu")  # the CPU chosen on purpose
    assert system.pick_device() == torch.device("cpu")
    monkeypatch.setenv("VITBN_DEVICE", "cuda")
    system._check_cuda.cache_clear()
    with pytest.raises(system.DeviceError, match="CUDA cannot be used"):
        system.pick_device()
    with pytest.raises(system.DeviceError, match="'tpu' is not a device"):
        system.pick_device("tpu")


def test_checkpoints_are_written_by_time_and_at_the_deadline(run_store, mnist_ready, monkeypatch):
    saved = []
    real_save = atomic.torch_save
    monkeypatch.setattr(atomic, "torch_save", lambda obj, path: (saved.append(path.name), real_save(obj, path)))
    monkeypatch.setenv("VITBN_CHECKPOINT_SECONDS", "3600")
    training.train(runs.RunConfig(**TINY), progress=False)
    assert saved == ["model.pt"]  # three epochs inside the hour: no checkpoint, only the final weights

    saved.clear()
    monkeypatch.setenv("VITBN_CHECKPOINT_SECONDS", "0")
    training.train(runs.RunConfig(**TINY, seed=1), progress=False)
    assert saved == ["checkpoint.pt", "checkpoint.pt", "model.pt"]  # every epoch but the last

    saved.clear()
    monkeypatch.setenv("VITBN_CHECKPOINT_SECONDS", "3600")
    config = runs.RunConfig(**TINY, seed=2)
    with pytest.raises(limits.DeadlineReached):
        training.train(config, progress=False, deadline=limits.Deadline(at=1e-9, clock=lambda: 0.0))
    assert saved == ["checkpoint.pt"]  # written at the deadline although the hour had not passed
    assert records.read_record(run_store / config.run_id("cpu"))["checkpoint_epoch"] == 1

    with pytest.raises(ValueError, match="VITBN_CHECKPOINT_SECONDS='soon'"):
        monkeypatch.setenv("VITBN_CHECKPOINT_SECONDS", "soon")
        training.train(runs.RunConfig(**TINY, seed=3), progress=False)


def _as_if_trained_on_a_gpu(run: runs.Run, config: runs.RunConfig) -> str:
    """Move a finished CPU run to the id a CUDA machine would have given it, with a GPU in its record."""
    gpu_id = config.run_id("cuda")
    record = records.read_record(run.folder)
    record["config"] = config.to_dict()
    folder = run.folder.rename(run.folder.parent / gpu_id)
    gpu = {**record["hardware"], "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}
    record.update(run_id=gpu_id, hardware=gpu, segments=[{**record["segments"][0], "hardware": gpu}])
    write_record(folder / "record.json", record)
    return gpu_id


def test_runs_trained_on_another_device_type_are_rendered_not_retrained(run_store, mnist_ready, monkeypatch):
    config = runs.RunConfig(**TINY)
    gpu_id = _as_if_trained_on_a_gpu(training.train(config, progress=False), config)
    found = training.train(config, device="cpu", progress=False, train=False)
    assert found.run_id == gpu_id and found.record["hardware"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert runs.stored_id(config, torch.device("cpu")) == gpu_id
    assert runs.trained_on([gpu_id]) == {"NVIDIA H100 80GB HBM3": 1}


def test_a_gpus_stacked_runs_render_where_the_plan_trains_them_one_by_one(run_store, mnist_ready, monkeypatch):
    config = runs.RunConfig(**TINY)
    stacked = dataclasses.replace(config, engine="stacked")
    gpu_id = _as_if_trained_on_a_gpu(training.train(config, progress=False), stacked)
    assert runs.Run(run_store / gpu_id).config.engine == "stacked"
    found = training.train(config, device="cpu", progress=False, train=False)
    assert found.run_id == gpu_id and runs.stored_id(config, torch.device("cpu")) == gpu_id
    assert run_folder.missing_runs([config], torch.device("cpu")) == []


def test_a_measurement_is_taken_once_kept_with_its_run_and_named_in_footers(run_store, mnist_ready):
    run = training.train(runs.RunConfig(**TINY), progress=False)
    taken = []

    def measure():
        taken.append(1)
        return {"ms": 1.5}

    assert runs.measured(run, "latency", measure, torch.device("cpu")) == {"ms": 1.5}
    again = runs.Run(run.folder)  # read back from the store, as a chapter rendered later would
    assert runs.measured(again, "latency", measure, torch.device("cpu")) == {"ms": 1.5}
    assert len(taken) == 1
    entry = again.record["measurements"]["latency"]
    assert entry["hardware"]["device"] == "cpu" and entry["measured"]
    here = system.hardware_label()
    assert runs.timed_on([run.run_id]) == {here: 1}
    footer = figures.stamp("smoke", [run.run_id])
    assert f"trained on {here} (1 run)" in footer and f"timed on {here} (1 run)" in footer
    # the day its data ends, read from the record: the same footer wherever and whenever it is rendered again
    assert footer.endswith(f"runs up to {again.record['measurements']['latency']['measured'][:10]}")
    assert "rendered on" not in footer
    assert figures.stamp("smoke") == f"profile: smoke | {here} | {figures.today()}"  # nothing trained: one machine
    assert runs.measured(again, "accuracy", lambda: 0.5, None) == 0.5  # a number of the weights alone: not a timing
    assert runs.Run(run.folder).record["measurements"]["accuracy"]["hardware"] is None
    assert runs.timed_on([run.run_id]) == {here: 1}
    # timed again in new rounds with other runs: the new value replaces the stored one, in the store too
    assert runs.measured(again, "latency", lambda: {"ms": 2.5}, torch.device("cpu"), retake=True) == {"ms": 2.5}
    assert runs.measured(runs.Run(run.folder), "latency", measure, torch.device("cpu")) == {"ms": 2.5}
    assert len(taken) == 1


def test_the_footer_sits_below_a_legend_under_the_axes_and_within_the_figure_width(figures_store, monkeypatch):
    import matplotlib.pyplot as plt

    figures.use_style()
    long = "profile: smoke | trained on a machine with a long name (3 runs) | rendered on another one | 2026-11-23"
    monkeypatch.setattr(figures, "stamp", lambda profile, run_ids=(), made=None: long)
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2], label="a line")
    legend = fig.legend(loc="outside lower center")
    drawn = []  # as saved (PNG and SVG), where saving with bbox "tight" has moved the figure's edges
    fig.canvas.mpl_connect(
        "draw_event",
        lambda event: (
            fig.texts
            and drawn.append(
                (legend.get_window_extent(event.renderer), fig.texts[-1].get_window_extent(event.renderer))
            )
        ),
    )
    result = types.SimpleNamespace(chapter="x", profile="smoke", run_ids=[])
    figures.save_figure(fig, "footer", result, reproduces="new/footer", caption="c")
    footer = fig.texts[-1]
    assert footer.get_text().replace("\n", " | ") == long and "\n" in footer.get_text()  # broken between parts
    assert drawn
    for legend_box, footer_box in drawn:
        assert footer_box.y1 < legend_box.y0  # below the legend, not over it
    assert fig.texts[-1].get_window_extent().width <= fig.bbox.width


def test_a_resumed_run_records_the_hardware_of_each_segment(run_store, mnist_ready):
    config = runs.RunConfig(**TINY)
    with pytest.raises(limits.DeadlineReached):
        training.train(config, progress=False, deadline=limits.Deadline(at=1e-9, clock=lambda: 0.0))
    record = training.train(config, progress=False).record
    assert record["resumed_at"] == [1]
    assert [s["from_epoch"] for s in record["segments"]] == [0, 1]
    assert all(s["hardware"]["device"] == "cpu" and s["versions"]["torch"] for s in record["segments"])


def test_a_kill_between_a_checkpoint_and_its_record_resumes_from_the_checkpoint(run_store, mnist_ready):
    config = runs.RunConfig(**TINY)
    with pytest.raises(limits.DeadlineReached):
        training.train(config, progress=False, deadline=limits.Deadline(at=1e-9, clock=lambda: 0.0))
    path = run_store / config.run_id("cpu") / "checkpoint.pt"
    checkpoint = torch.load(path, weights_only=False)
    # As if the process died right after writing epoch 2's checkpoint, before the record took its checksum.
    torch.save({**checkpoint, "epochs": [*checkpoint["epochs"], {**checkpoint["epochs"][0], "epoch": 2}]}, path)
    assert training.train(config, progress=False).record["resumed_at"] == [2]

    other = runs.RunConfig(**TINY, seed=1)
    with pytest.raises(limits.DeadlineReached):
        training.train(other, progress=False, deadline=limits.Deadline(at=1e-9, clock=lambda: 0.0))
    path = run_store / other.run_id("cpu") / "checkpoint.pt"
    torch.save({**torch.load(path, weights_only=False), "note": "changed"}, path)  # no newer: damaged
    with pytest.raises(runs.RunStoreError, match="does not match its checksum"):
        training.train(other, progress=False)


def test_a_stack_takes_a_member_finished_one_by_one_and_trains_the_rest(run_store, mnist_ready):
    eager = runs.RunConfig(**TINY)
    finished = training.train(eager, progress=False)
    stacked = [dataclasses.replace(eager, engine="stacked", seed=seed) for seed in (0, 1)]
    taken, trained = training.train_all(stacked, device="cpu", progress=False)
    assert taken.run_id == finished.run_id and taken.config.engine == "eager"
    assert trained.run_id == stacked[1].run_id("cpu") and trained.config.engine == "stacked"


def test_a_run_has_a_stacked_variant_only_where_it_can_stack():
    plain = runs.RunConfig(**TINY)
    assert [v.engine for v in plain.variants()] == ["eager", "stacked"]
    assert [v.engine for v in dataclasses.replace(plain, engine="stacked").variants()] == ["stacked", "eager"]
    dropout = runs.RunConfig(model="ViT", model_kwargs={"depth": 1, "dropout": 0.1}, epochs=1)
    assert [v.engine for v in dropout.variants()] == ["eager"]
