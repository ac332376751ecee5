"""The paper profile's campaign over sessions: what it trains first, what it leaves for later, what it commits."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from vitbn_nb import campaign, chapters, system
from vitbn_nb.engines import training
from vitbn_nb.limits import Deadline
from vitbn_nb.store import committed
from vitbn_nb.system import hardware_label


class Priced:
    """An estimator that prices a run at 10 s per block of depth and knows nothing is stored."""

    device = torch.device("cpu")

    def __init__(self, configs, device=None, known=(), retrain=frozenset(), beside=0):
        pass

    def busy(self):
        return ""

    def seconds_left(self, config):
        return 10.0 * config.model_kwargs.get("depth", 1)


@pytest.fixture
def smoke_campaign(monkeypatch, run_store):
    """The campaign's stages planned under smoke (chapter 05 at depths 1, 3 and 6; chapter 03 at one lr)."""
    monkeypatch.setattr(campaign, "PROFILE", "smoke")
    stages = (campaign.Stage("05_depth_study"), campaign.Stage("03_fixed_lr", lrs=(0.05,), quiet=True))
    monkeypatch.setattr(campaign, "STAGES", stages)
    return stages


def fake_training(monkeypatch):
    trained = []

    def train_all(unit, deadline=None, one_stream=False):
        trained.extend(unit)
        return []

    monkeypatch.setattr(campaign.training, "train_all", train_all)
    monkeypatch.setattr(campaign, "Estimator", Priced)
    return trained


def test_the_engine_follows_the_device(monkeypatch):
    assert chapters.settings("05_depth_study", "paper").engine == "eager"  # these machines have no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert chapters.settings("05_depth_study", "paper").engine == "stacked"
    assert chapters.settings("05_depth_study", "cpu").engine == "eager"  # a profile that says so keeps it
    with pytest.raises(ValueError, match="engine='fast'.*'auto'"):
        chapters.settings("05_depth_study", "paper", engine="fast")


def test_cheapest_runs_first_and_a_quiet_stage_waits_for_quiet(smoke_campaign, monkeypatch):
    trained = fake_training(monkeypatch)
    logged = []
    with pytest.raises(campaign.Unfinished, match="run\\(s\\) left"):
        campaign.train(log=logged.append)
    depths = [c.model_kwargs["depth"] for c in trained]
    assert depths == sorted(depths) and set(depths) == {1, 3, 6}
    assert {c.model for c in trained} == {"ViT", "ViTBNFFN", "ViTDyT"}  # chapter 05 only (ViTDyT beside at d6)
    assert any("03_fixed_lr" in line and "quiet" in line for line in logged)
    trained.clear()
    with pytest.raises(campaign.Unfinished):
        campaign.train(quiet=True, log=logged.append)
    assert {c.lr for c in trained} >= {0.05} and any(c.pipeline == "reference" for c in trained)
    # on a quiet machine the timed stage trains before the untimed one
    assert trained[0].pipeline == "reference" and trained[-1].pipeline != "reference"


def test_two_workers_take_different_units_and_leave_the_timed_stage_to_one(smoke_campaign, monkeypatch):
    trained = fake_training(monkeypatch)
    held: set[str] = set()  # the units another worker holds, by their first run's id
    monkeypatch.setattr(campaign, "_free", lambda unit, device, retrain: unit[0].run_id("cpu") not in held)
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=logged.append, worker=1, workers=2)
    assert trained and all(c.pipeline != "reference" for c in trained)  # no unit of the timed stage
    assert any("03_fixed_lr" in line and "one-worker" in line for line in logged)
    first_alone = trained[0]
    trained.clear()
    held.add(first_alone.run_id("cpu"))
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=logged.append, worker=1, workers=2)
    assert trained[0] != first_alone  # a unit another worker holds is passed over while a free one is left


def test_a_worker_with_nothing_free_says_it_waits_and_never_that_it_trains(smoke_campaign, monkeypatch):
    """A worker that found every unit held once logged 'training ... (estimated 4.0 min)' while it only waited on the
    other worker's lock: the line says it waits, and for which runs."""
    trained = fake_training(monkeypatch)
    monkeypatch.setattr(campaign, "_free", lambda unit, device, retrain: False)  # the other worker holds them all
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=logged.append, worker=1, workers=2)
    first = trained[0].label()
    assert any(line.endswith(f"waiting for {first}, which another worker is training") for line in logged)
    assert not any("training " + first in line and "estimated" in line for line in logged)
    monkeypatch.setattr(campaign, "_free", lambda unit, device, retrain: True)
    logged.clear()
    trained.clear()
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=logged.append, worker=1, workers=2)
    assert any(f"training {trained[0].label()} (estimated" in line for line in logged)
    assert not any("waiting for" in line for line in logged)


def test_a_timed_stage_says_when_its_runs_so_far_were_timed_on_another_machine(smoke_campaign, monkeypatch):
    fake_training(monkeypatch)
    machines = {hardware_label(): 3, "CPU: elsewhere (2 cores)": 2}
    monkeypatch.setattr(campaign, "_trained_on", lambda stage, device, done=None: machines)
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(quiet=True, log=logged.append)
    warned = [line for line in logged if "CPU: elsewhere (2 cores)" in line]
    assert len(warned) == 1 and warned[0].startswith("03_fixed_lr: 2 of its runs") and "one machine" in warned[0]
    assert f"on {hardware_label()}," not in warned[0]  # this machine's own runs are not "elsewhere"
    del machines["CPU: elsewhere (2 cores)"]
    logged.clear()
    with pytest.raises(campaign.Unfinished):
        campaign.train(quiet=True, log=logged.append)
    assert not any("of its runs were trained" in line for line in logged)


def test_a_deadline_starts_only_the_runs_estimated_to_fit(smoke_campaign, monkeypatch):
    trained = fake_training(monkeypatch)
    clock = [0.0]
    deadline = Deadline(at=45.0, clock=lambda: clock[0], margin=1.0)  # 45 s: depths 1 and 3, not 6
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(deadline, log=logged.append)
    assert trained and {c.model_kwargs["depth"] for c in trained} <= {1, 3}
    assert any("not started" in line and "left before the deadline" in line for line in logged)


def test_a_calibration_taken_under_load_is_taken_anew_once_the_machine_is_quiet(smoke_campaign, monkeypatch):
    trained = fake_training(monkeypatch)
    calibrations = []

    class LoadedThenQuiet(Priced):
        """The first calibration ran beside other work and prices every run 3x; later ones find the machine quiet."""

        def __init__(self, configs, device=None, known=(), retrain=frozenset(), beside=0):
            self.loaded = not calibrations
            calibrations.append(len(configs))

        def busy(self):
            return "the calibration ran while 3 other process(es) were running" if self.loaded else ""

        def seconds_left(self, config):
            return (3.0 if self.loaded else 1.0) * super().seconds_left(config)

    monkeypatch.setattr(campaign, "Estimator", LoadedThenQuiet)
    clock = [0.0]
    deadline = Deadline(at=45.0, clock=lambda: clock[0], margin=1.0)  # loaded: only depth 1 fits; quiet: 1 and 3
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(deadline, log=logged.append)
    assert len(calibrations) == 2 and {c.model_kwargs["depth"] for c in trained} == {1, 3}
    assert any("other process(es)" in line for line in logged)


def test_the_price_correction_leaves_out_epochs_timed_beside_other_work(tmp_path, monkeypatch):
    config = chapters.study("05_depth_study").plan(chapters.settings("05_depth_study", "smoke"))[0]
    (tmp_path / "record.json").write_text("{}")
    epochs = [
        {"train_seconds": 9.0, "test_seconds": 1.0, "load_1min": 1.9, "cpu_cores": 2},
        {"train_seconds": 99.0, "test_seconds": 1.0, "load_1min": 3.1, "cpu_cores": 2},
        {"train_seconds": 99.0, "test_seconds": 1.0, "load_1min": 2.6, "cpu_cores": 2},
    ]
    monkeypatch.setattr(campaign, "stored_path", lambda run_id: tmp_path)
    monkeypatch.setattr(campaign, "read_record", lambda folder: {"epochs": epochs, "hardware": HERE})
    estimator = campaign.Estimator([config], torch.device("cpu"), calibrate=False)
    assert estimator._measured(config) == 100.0  # the run's own pace, whatever the load: what its next epoch takes
    assert estimator._measured(config, quiet=True) == 10.0  # the correction's: the epochs the book times only


def test_a_campaign_of_two_workers_prices_by_epochs_trained_beside_its_other_worker(tmp_path, monkeypatch):
    """Two one-thread workers on two cores time every epoch beside each other: those epochs price such a campaign's
    units (a worker's calibration under-priced them 1.5x when none counted), while an epoch beside more than the other
    worker, or any epoch beside another process in a one-worker campaign, prices nothing."""
    config = chapters.study("05_depth_study").plan(chapters.settings("05_depth_study", "smoke"))[0]
    (tmp_path / "record.json").write_text("{}")
    epoch = lambda other: {"train_seconds": 150.0, "test_seconds": 10.0, "other_cpu_seconds": other * 150.0}
    epochs = [epoch(1.02), epoch(1.05), epoch(1.6) | {"train_seconds": 240.0, "other_cpu_seconds": 384.0}]
    monkeypatch.setattr(campaign, "stored_path", lambda run_id: tmp_path)
    monkeypatch.setattr(campaign, "read_record", lambda folder: {"epochs": epochs, "hardware": HERE})
    assert campaign.Estimator([config], torch.device("cpu"), calibrate=False)._measured(config, quiet=True) is None
    workers = campaign.Estimator([config], torch.device("cpu"), calibrate=False, beside=1)
    assert workers._measured(config, quiet=True) == 160.0  # the third epoch, beside other work too, left out


#: This machine, and another CPU (the campaign's sessions land on machines of different speeds).
HERE = system.hardware(torch.device("cpu"))
ELSEWHERE = {"device": "cpu", "cpu": "a slower test CPU", "cpu_cores": 2}


def test_epochs_another_machine_trained_price_nothing_here(tmp_path, monkeypatch):
    """A run resumed here after two epochs elsewhere is priced by its epochs here; a run trained only elsewhere is
    priced by this machine's calibration."""
    config = chapters.study("05_depth_study").plan(chapters.settings("05_depth_study", "smoke"))[0]
    (tmp_path / "record.json").write_text("{}")
    epoch = lambda seconds: {"train_seconds": seconds - 1, "test_seconds": 1.0, "load_1min": 1.0, "cpu_cores": 2}
    resumed = {
        "epochs": [epoch(90.0), epoch(90.0), epoch(30.0)],
        "hardware": HERE,
        "segments": [{"hardware": ELSEWHERE}, {"hardware": HERE, "from_epoch": 2}],
    }
    record = {}
    monkeypatch.setattr(campaign, "stored_path", lambda run_id: tmp_path)
    monkeypatch.setattr(campaign, "read_record", lambda folder: record)
    monkeypatch.setattr(campaign.Estimator, "_calibrated", lambda self, config: 40.0)
    record.update(resumed)
    estimator = campaign.Estimator([config], torch.device("cpu"), calibrate=False)
    assert estimator._measured(config) == 30.0 and estimator.correction == 30.0 / 40.0
    record.update(epochs=[epoch(90.0)] * 3, hardware=ELSEWHERE, segments=[{"hardware": ELSEWHERE}])
    estimator = campaign.Estimator([config], torch.device("cpu"), calibrate=False)
    assert estimator._measured(config) is None and estimator.correction == 1.0
    assert estimator.epoch_seconds(config) == 40.0


def test_an_unstarted_run_is_priced_by_its_other_seeds_and_the_correction_reads_finished_runs(tmp_path, monkeypatch):
    """A campaign's left runs are mostly unstarted: their finished seeds price them, and the calibration's correction
    is read from the finished runs of the stage, not only from the (unstarted) runs it prices."""
    plan = chapters.study("05_depth_study").plan(chapters.settings("05_depth_study", "smoke"))
    kinds = list({(c.model, c.lr, c.model_kwargs["depth"]): c for c in plan}.values())
    seed = lambda config, n: dataclasses.replace(config, seed=n)
    finished, unstarted, loaded = kinds[0], seed(kinds[0], 1), seed(kinds[0], 2)
    elsewhere, other = kinds[1], kinds[2]  # a finished run of another kind; an unstarted one with no seed run
    epoch = lambda seconds, load: {"train_seconds": seconds - 1, "test_seconds": 1.0, "load_1min": load, "cpu_cores": 2}
    epochs = lambda seconds, load: [epoch(seconds, load)] * 3
    timed = {
        finished.run_id("cpu"): epochs(10.0, 2.0),
        loaded.run_id("cpu"): epochs(100.0, 3.0),  # timed beside other work: prices nothing
        elsewhere.run_id("cpu"): epochs(30.0, 1.8),
    }
    for run_id in timed:
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "record.json").write_text("{}")
    monkeypatch.setattr(campaign, "stored_path", lambda run_id: tmp_path / run_id)
    monkeypatch.setattr(campaign, "read_record", lambda folder: {"epochs": timed[folder.name], "hardware": HERE})
    monkeypatch.setattr(campaign.Estimator, "_calibrated", lambda self, config: 40.0)

    alone = campaign.Estimator([unstarted, other], torch.device("cpu"), calibrate=False)
    assert alone.correction == 1.0 and alone.epoch_seconds(unstarted) == 40.0  # nothing measured to go by
    known = [finished, loaded, elsewhere, unstarted, other]
    estimator = campaign.Estimator([unstarted, other], torch.device("cpu"), calibrate=False, known=known)
    assert estimator.correction == 0.5  # the median of 10/40 and 30/40 (the loaded seed left out)
    assert estimator.epoch_seconds(unstarted) == 10.0  # its finished seed's quiet epochs
    assert estimator.epoch_seconds(other) == 20.0  # no seed of its own: 40 s priced x 0.5


def test_started_runs_resume_before_cheaper_ones(smoke_campaign, monkeypatch):
    configs = smoke_campaign[0].configs()
    deepest = max(configs, key=lambda c: c.model_kwargs["depth"])
    monkeypatch.setattr(campaign, "_epochs_done", lambda c, device, retrain=frozenset(): 1 if c == deepest else 0)
    order = campaign._order(training.units(configs), Priced(configs))
    assert order[0] == [deepest]
    assert [u[0].model_kwargs["depth"] for u in order[1:]] == sorted(u[0].model_kwargs["depth"] for u in order[1:])


@pytest.mark.slow
def _book_figures(monkeypatch, tmp_path):
    """A private figures folder that ``campaign commit`` writes into and renders read its committed records from."""
    figures = tmp_path / "figures"
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(figures))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "")
    return figures


def test_a_finished_run_is_committed_and_kept_by_every_render(smoke_campaign, monkeypatch, tmp_path, mnist_ready):
    figures = _book_figures(monkeypatch, tmp_path)
    cheapest = min(smoke_campaign[0].configs(), key=lambda c: c.model_kwargs["depth"])
    run = training.train(cheapest, progress=False)
    assert campaign.commit(log=lambda line: None) == [run.run_id]
    record = figures / "records" / run.run_id / "record.json"
    assert json.loads(record.read_text())["status"] == "finished"
    assert not (record.parent / "model.pt").exists()  # records only, never weights
    assert campaign.commit(log=lambda line: None) == []  # nothing new
    table = campaign.status()
    assert table.loc[table["stage"] == "05_depth_study", "finished"].item() == 1
    assert table.loc[table["stage"] == "05_depth_study", "trained on"].item() == f"{hardware_label()}: 1"
    # a render whose outputs name no campaign run keeps the campaign's record
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "manifest.json").write_text(json.dumps({"outputs": {}}))
    committed.stage(staging, tmp_path / "empty-store", campaign.run_ids())
    assert (staging / "records" / run.run_id / "record.json").is_file()


def test_a_chapter_renders_at_paper_once_every_paper_run_of_its_first_seeds_is_held(monkeypatch):
    from vitbn_nb.store import run_folder

    asked = []
    monkeypatch.setattr(run_folder, "missing_runs", lambda configs: asked.append(configs) or [])
    assert chapters.evidence_profile("05_depth_study", "cpu") == "paper"
    paper = chapters.settings("05_depth_study", "paper")
    assert {c.seed for c in asked[-1]} == set(range(paper.seeds))  # the seed plan's further seeds: the campaign's
    assert chapters.evidence_profile("05_depth_study", "smoke") == "smoke"  # only a cpu book is upgraded
    assert chapters.evidence_profile("02_models", "cpu") == "cpu"  # trains nothing: no evidence to follow
    assert chapters.evidence_profile("04_bayes_opt", "cpu") == "cpu"  # its final runs follow its optimisation
    monkeypatch.setattr(run_folder, "missing_runs", lambda configs: ["one-run"])
    assert chapters.evidence_profile("05_depth_study", "cpu") == "cpu"


def test_a_chapter_opened_with_profile_auto_shows_the_held_paper_runs_and_trains_nothing(monkeypatch, capsys):
    from vitbn_nb.store import run_folder

    monkeypatch.setattr(run_folder, "missing_runs", lambda configs: [])
    settings, force = chapters.parameters("05_depth_study", "auto")
    assert settings.profile == "paper" and force is False
    assert settings.train is False  # what is held is read; a missing run is named, never trained
    assert "nothing trains" in capsys.readouterr().out
    named = chapters.parameters("05_depth_study", "cpu")[0]
    assert named.profile == "cpu" and named.train is True  # a profile named is that profile, and trains what it lacks
    # a protocol setting given by hand: the held runs are the protocol's, so 'auto' is this machine's own profile
    varied = chapters.parameters("05_depth_study", "auto", given={"epochs": "3"})[0]
    assert varied.profile == "cpu" and varied.epochs == 3 and varied.train is True
    assert chapters.variant(varied) == "epochs-3"


def test_the_campaign_plans_every_stage_without_the_notebook_display():
    """A GPU image with torch but not IPython must run the campaign: planning a chapter loads no notebook display."""
    blocker = (
        "import sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('IPython', 'ipywidgets'):\n"
        "            raise ImportError(name + ' is not installed here')\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "from vitbn_nb import campaign\n"
        "print(sum(len(stage.configs()) for stage in campaign.STAGES))\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == sum(len(stage.configs()) for stage in campaign.STAGES)


def test_the_committed_records_a_render_keeps_include_a_gpus_stacked_runs():
    kept = campaign.run_ids()
    for config in campaign.STAGES[0].configs():
        assert {v.run_id(kind) for v in config.variants() for kind in ("cpu", "cuda")} <= kept
    assert any(v.engine == "stacked" for c in campaign.STAGES[0].configs() for v in c.variants())


def test_the_dry_run_prints_each_stage_s_runs_and_hours_left_and_trains_nothing(smoke_campaign, monkeypatch, capsys):
    from vitbn_nb.__main__ import main

    trained = fake_training(monkeypatch)
    assert main(["campaign", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "05_depth_study" in printed and "03_fixed_lr" in printed and "estimated hours left" in printed
    assert not trained


def test_an_optimising_stage_searches_then_retrains_and_commits_its_state(
    monkeypatch, run_store, tmp_path, mnist_ready
):
    """Chapter 04 as a campaign stage: its searches first (resumable Ax studies), then each model's best settings
    retrained; nothing is counted before a search suggests it, and `campaign commit` keeps the trials, the retrains
    and the searches' state, which every render then keeps."""
    monkeypatch.setattr(campaign, "PROFILE", "smoke")
    stage = campaign.Stage("04_bayes_opt", quiet=True, rounds="vitbn_nb.chapters.bayes_opt.timing_stage")
    monkeypatch.setattr(campaign, "STAGES", (stage,))
    device = torch.device("cpu")
    assert stage.configs() == [] and len(stage.open_searches(device)) == 3
    assert campaign.measure(log=lambda line: None) == []  # no search done: no model to time
    placeholders = stage.placeholders(device)
    assert len(placeholders) == 3 * 3 + 3  # the trials left, then one retrain per model at smoke's one seed
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=lambda line: None)  # a timed stage: not on a machine that is not said to be quiet
    original = chapters.settings  # smoke's protocol standing in for paper's: a cpu book upgrades once it is all held
    monkeypatch.setattr(
        chapters, "settings", lambda c, p="auto", **kw: original(c, "smoke" if p == "paper" else p, **kw)
    )
    assert chapters.evidence_profile("04_bayes_opt", "cpu") == "cpu"
    campaign.train(quiet=True, log=lambda line: None)
    assert chapters.evidence_profile("04_bayes_opt", "cpu") == "paper"
    monkeypatch.setattr(chapters, "settings", original)
    assert stage.open_searches(device) == [] and len(stage.trials()) == 9
    assert [c.epochs for c in stage.finals()] == [2, 2, 2]
    # Table 3's timing rounds, once every search is done; kept beside the searches' state, and committed with it
    assert campaign.measure(log=lambda line: None) == ["04_bayes_opt timing rounds"]
    timing = "timing-smoke.json"
    _book_figures(monkeypatch, tmp_path)
    copied = campaign.commit(log=lambda line: None)
    assert len([c for c in copied if not c.startswith("hpo/")]) == 12
    assert {c.split("/")[1] for c in copied if c.startswith("hpo/")} == {s.key("cpu") for s in stage.studies()} | {
        timing
    }
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "manifest.json").write_text(json.dumps({"outputs": {"article1_table3": {"profile": "smoke"}}}))
    committed.stage(staging, tmp_path / "empty-store", campaign.run_ids())
    kept = staging / "records" / "hpo"
    assert {p.name for p in kept.iterdir() if p.is_dir()} == {s.key("cpu") for s in stage.studies()}
    assert (kept / timing).read_bytes() == (run_store / "hpo" / timing).read_bytes()


def test_a_committed_record_is_replaced_only_by_name(smoke_campaign, monkeypatch, tmp_path, mnist_ready):
    """`campaign commit` never overwrites a committed record with a store run that differs from it (a resealed
    record with other accuracies): it refuses, naming both files, and commits nothing, unless the run is named with
    --replace; a measurement added to a finished run's record is committed as usual."""
    from vitbn_nb.store.records import RunStoreError, write_record

    figures = _book_figures(monkeypatch, tmp_path)
    cheapest = min(smoke_campaign[0].configs(), key=lambda c: c.model_kwargs["depth"])
    run = training.train(cheapest, progress=False)
    assert campaign.commit(log=lambda line: None) == [run.run_id]
    committed_path = figures / "records" / run.run_id / "record.json"
    before = committed_path.read_text()
    stored = json.loads((run.folder / "record.json").read_text())
    stored["measurements"] = {"a measurement": {"value": 1.0}}
    write_record(run.folder / "record.json", stored)
    assert campaign.commit(log=lambda line: None) == [run.run_id]  # a measurement added: committed
    stored["epochs"][-1]["test_acc"] = 99.9  # invented, and resealed
    write_record(run.folder / "record.json", stored)
    measured = committed_path.read_text()
    with pytest.raises(RunStoreError, match=f"{run.run_id}.*--replace {run.run_id}"):
        campaign.commit(log=lambda line: None)
    assert committed_path.read_text() == measured != before
    said = []
    assert campaign.commit(log=said.append, replace={run.run_id}) == [run.run_id]
    assert json.loads(committed_path.read_text())["epochs"][-1]["test_acc"] == 99.9
    assert any("--replace" in line for line in said)


def test_a_committed_record_of_a_run_that_never_ended_gives_way_to_the_finished_run(
    smoke_campaign, monkeypatch, tmp_path, mnist_ready
):
    """A record committed while its run still trained (status running, no epochs: a search trial's, kept by an
    earlier commit) is no evidence: once the run finishes, `campaign commit` copies it without --replace."""
    from vitbn_nb.store.records import RunStoreError

    figures = _book_figures(monkeypatch, tmp_path)
    cheapest = min(smoke_campaign[0].configs(), key=lambda c: c.model_kwargs["depth"])
    run = training.train(cheapest, progress=False)
    unfinished = json.loads((run.folder / "record.json").read_text()) | {"status": "running", "epochs": []}
    committed_path = figures / "records" / run.run_id / "record.json"
    committed_path.parent.mkdir(parents=True)
    committed_path.write_text(json.dumps(unfinished))
    assert campaign.commit(log=lambda line: None) == [run.run_id]
    assert json.loads(committed_path.read_text())["status"] == "finished"
    ended = json.loads(committed_path.read_text()) | {"status": "diverged"}
    committed_path.write_text(json.dumps(ended))  # an ended record, changed: refused as before
    with pytest.raises(RunStoreError, match="--replace"):
        campaign.commit(log=lambda line: None)


def test_a_run_from_elsewhere_is_committed_only_once_it_replays(smoke_campaign, monkeypatch, tmp_path, mnist_ready):
    """A record's checksum proves a file whole, not a run: a resealed record with invented accuracies imports, but
    `runs verify` replays it (its first epoch from its seed, its weights tested) and refuses it, and `campaign commit`
    commits no imported run before a replay passes; a genuine run from another store replays bit-exact here."""
    from vitbn_nb.engines import replay
    from vitbn_nb.publishing import readme
    from vitbn_nb.store import bundle, provenance
    from vitbn_nb.store.records import RunStoreError, write_record

    figures = _book_figures(monkeypatch, tmp_path)
    cheapest = min(smoke_campaign[0].configs(), key=lambda c: c.model_kwargs["depth"])
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(elsewhere))
    run = training.train(cheapest, progress=False)
    genuine, forged = tmp_path / "genuine.tar.gz", tmp_path / "forged.tar.gz"
    bundle.export(genuine, needed=None, store=elsewhere)
    record = json.loads((run.folder / "record.json").read_text())
    for epoch in record["epochs"]:
        epoch["test_acc"] = 99.99
    write_record(run.folder / "record.json", record)  # sealed anew, as anyone can
    bundle.export(forged, needed=None, store=elsewhere)

    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "here"))
    bundle.import_bundle(forged)
    assert provenance.waiting(tmp_path / "here") == [run.run_id]
    with pytest.raises(RunStoreError, match=f"{run.run_id}.*not yet replayed.*runs verify {run.run_id}"):
        campaign.commit(log=lambda line: None)
    table = replay.verify(progress=False)
    assert list(table["passed"]) == [False] and "test accuracy replays as" in table["why"].iloc[0]
    with pytest.raises(RunStoreError, match="did not replay"):
        campaign.commit(log=lambda line: None)
    assert not (figures / "records").exists()

    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "there"))
    bundle.import_bundle(genuine)
    table = replay.verify(progress=False)
    assert list(table["passed"]) == [True] and list(table["compared"]) == ["bit-exact"]
    assert campaign.commit(log=lambda line: None) == [run.run_id]
    assert provenance.status(figures / "records" / run.run_id) == provenance.VERIFIED
    assert "1 imported from another store and replayed on" in readme.trust_line(figures)


@pytest.mark.parametrize("setting", ["", "ignore"])
def test_a_bundle_run_that_differs_from_its_committed_record_never_changes_it(
    smoke_campaign, monkeypatch, tmp_path, mnist_ready, setting
):
    """Under every VITBN_COMMITTED_RECORDS setting, `runs import` + `campaign commit` (even with --replace) leave a
    committed record as it was when a bundle brings a resealed copy with other accuracies: refused at the import
    where the committed records are read, and, where they are ignored, imported unverified and never committed."""
    from vitbn_nb.engines import replay
    from vitbn_nb.store import bundle
    from vitbn_nb.store.records import RunStoreError, write_record

    figures = _book_figures(monkeypatch, tmp_path)
    cheapest = min(smoke_campaign[0].configs(), key=lambda c: c.model_kwargs["depth"])
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "elsewhere"))
    run = training.train(cheapest, progress=False)
    assert campaign.commit(log=lambda line: None) == [run.run_id]
    committed_path = figures / "records" / run.run_id / "record.json"
    committed = committed_path.read_bytes()
    record = json.loads((run.folder / "record.json").read_text())
    record["epochs"][-1]["test_acc"] = 99.9
    write_record(run.folder / "record.json", record)
    forged = tmp_path / "forged.tar.gz"
    bundle.export(forged, needed=None, store=tmp_path / "elsewhere")

    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "here"))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", setting)
    if setting == "ignore":
        bundle.import_bundle(forged)  # nothing to conflict with: in, but unverified
        for replace in (frozenset(), {run.run_id}):
            with pytest.raises(RunStoreError, match="not yet replayed"):
                campaign.commit(log=lambda line: None, replace=replace)
        assert not replay.verify(progress=False)["passed"].any()
        with pytest.raises(RunStoreError, match="did not replay"):
            campaign.commit(log=lambda line: None, replace={run.run_id})
    else:
        with pytest.raises(bundle.BundleError, match="never replaced from elsewhere"):
            bundle.import_bundle(forged)
        assert campaign.commit(log=lambda line: None) == []
    assert committed_path.read_bytes() == committed


def test_a_chapters_plan_is_computed_once_per_rendering_and_handed_on(monkeypatch):
    """Choosing the scale plans the paper protocol; the chapter's run takes that plan (once) and plans no more."""
    from vitbn_nb.chapters.depth_study import study as depth
    from vitbn_nb.store import run_folder

    monkeypatch.setattr(chapters, "_KEPT_PLANS", {})
    counted = []
    original = depth.plan
    monkeypatch.setattr(depth, "plan", lambda chosen: counted.append(chosen.profile) or original(chosen))
    monkeypatch.setattr(run_folder, "missing_runs", lambda configs: [])
    settings, _ = chapters.parameters("05_depth_study", "auto")
    assert counted == ["paper"]
    handed = chapters.planned(settings, lambda chosen: pytest.fail("planned again"))
    assert handed and counted == ["paper"]
    again = chapters.planned(settings, depth.plan)  # taken once: a later run plans anew
    assert again == handed and counted == ["paper", "paper"]


def test_a_worker_passes_over_a_unit_another_worker_finished_meanwhile(smoke_campaign, monkeypatch):
    """Two workers once logged 'training ... (estimated 0 s)' for a run the other had just finished: a worker's list
    of units, taken when it started, drops whatever the store holds finished before it picks the next one."""
    trained = fake_training(monkeypatch)
    done: set[str] = set()
    monkeypatch.setattr(campaign, "_epochs_done", lambda c, *a, **k: c.epochs if c.run_id("cpu") in done else 0)
    others: list = []

    def train_all(unit, deadline=None, one_stream=False):
        trained.extend(unit)
        done.update(c.run_id("cpu") for c in unit)
        if not others:  # meanwhile the other worker finishes the next-cheapest unit of chapter 05
            rest = [c for c in smoke_campaign[0].configs() if c.run_id("cpu") not in done]
            others.extend(sorted(rest, key=lambda c: c.model_kwargs.get("depth", 1))[:1])
            done.update(c.run_id("cpu") for c in others)
        return []

    monkeypatch.setattr(campaign.training, "train_all", train_all)
    logged = []
    with pytest.raises(campaign.Unfinished):
        campaign.train(log=logged.append)
    ids = [c.run_id("cpu") for c in trained]
    assert others and others[0].run_id("cpu") not in ids and len(ids) == len(set(ids))  # nothing trained twice
    assert not any(f"training {others[0].label()}" in line for line in logged)
