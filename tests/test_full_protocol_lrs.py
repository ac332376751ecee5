"""Chapter 03 at a ``cpu`` rendering takes article 1's whole protocol at the lrs whose ``paper`` runs are all held:
the plan names the paper runs themselves, the book finds the lrs, the outputs at such an lr say their scale, and its
claims are judged."""

import numpy as np
import pandas as pd
import pytest

from vitbn_nb import chapters
from vitbn_nb.chapters.fixed_lr import judge, subnormals
from vitbn_nb.chapters.fixed_lr import study as fixed_lr
from vitbn_nb.chapters.fixed_lr.numbers import PAIRS
from vitbn_nb.judging import verdicts
from vitbn_nb.publishing.figures import read_manifest
from vitbn_nb.store import run_folder

CHAPTER = "03_fixed_lr"
FULL = "paper: 18,000 of the article's 18,000 steps"


def _at(configs, lr):
    return [c for c in configs if np.isclose(c.lr, lr)]


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_a_full_protocol_lr_plans_the_paper_plans_own_runs_and_leaves_the_rest_as_they_were(device_type):
    cpu = chapters.settings(CHAPTER, "cpu")
    upgraded = chapters.settings(CHAPTER, "cpu", full_protocol_lrs=(0.01,))
    paper_ids = {c.run_id(device_type) for c in _at(fixed_lr.plan(chapters.settings(CHAPTER, "paper")), 0.01)}
    cpu_ids = [c.run_id(device_type) for c in fixed_lr.plan(cpu)]
    planned = [c.run_id(device_type) for c in fixed_lr.plan(upgraded)]
    assert len(paper_ids) == 15
    # the profile's own runs (the sweep's and Fig 6's included) first and unchanged, then the 15 paper runs
    assert planned[: len(cpu_ids)] == cpu_ids
    assert set(planned[len(cpu_ids) :]) == paper_ids and len(planned) == len(cpu_ids) + 15
    # at paper the field changes nothing, and an lr the chapter does not study is refused
    paper = chapters.settings(CHAPTER, "paper")
    assert fixed_lr.plan(chapters.settings(CHAPTER, "paper", full_protocol_lrs=(0.01,))) == fixed_lr.plan(paper)
    with pytest.raises(ValueError, match="full_protocol_lrs"):
        fixed_lr.plan(chapters.settings(CHAPTER, "cpu", full_protocol_lrs=(0.02,)))


def test_a_cpu_rendering_takes_the_lrs_whose_paper_runs_are_all_held(monkeypatch):
    paper_ids = {c.run_id("cpu") for c in _at(fixed_lr.plan(chapters.settings(CHAPTER, "paper")), 0.01)}
    held = set(paper_ids)
    seen = []

    def missing(configs, device=None):
        seen.append(len(configs))
        return [c.run_id("cpu") for c in configs if c.run_id("cpu") not in held]

    monkeypatch.setattr(run_folder, "missing_runs", missing)
    assert chapters.full_protocol_lrs(CHAPTER, "cpu") == (0.01,)
    assert seen == [15, 15, 15]  # each lr's 15 paper runs, none of the sweep's
    settings, force = chapters.parameters(CHAPTER, "cpu", "false")
    assert settings.full_protocol_lrs == (0.01,) and force is False
    # only a cpu rendering, only chapter 03, and only where every run of the lr is held
    assert chapters.full_protocol_lrs(CHAPTER, "smoke") == ()
    assert chapters.full_protocol_lrs(CHAPTER, "paper") == ()
    assert chapters.full_protocol_lrs("05_depth_study", "cpu") == ()
    assert chapters.parameters("05_depth_study", "cpu")[0].profile == "cpu"
    held.discard(sorted(paper_ids)[0])
    assert chapters.full_protocol_lrs(CHAPTER, "cpu") == ()
    assert chapters.parameters(CHAPTER, "cpu")[0].full_protocol_lrs is None


def _runs(lr, epochs, train_size, prefix, seeds=3, vit=lambda s, e: 95.0 + s / 10):
    """A run table as ``runs.load_table`` gives it: the five (model, depth) pairs of Experiment 1 at ``lr``."""
    rows = []
    for model, depth in PAIRS:
        for seed in range(seeds):
            for epoch in range(1, epochs + 1):
                acc = vit(seed, epoch) if model == "ViT" else 96.0 + epoch / 100 - seed / 10
                rows.append(
                    {
                        "run_id": f"{prefix}-{model}-d{depth}-lr{lr:g}-s{seed}",
                        "status": "finished",
                        "model": model,
                        "depth": depth,
                        "lr": lr,
                        "seed": seed,
                        "epoch": epoch,
                        "epochs": epochs,
                        "train_seconds": 6.0 if model == "ViT" else 2.0 + depth / 10,
                        "test_seconds": 5.0 if model == "ViT" else 2.0,
                        "test_acc": acc,
                        "train_loss": 0.3 / epoch,
                        "diverged": False,
                        "dataset": "mnist",
                        "batch_size": 100,
                        "train_size": train_size,
                        "test_size": None if train_size is None else 2000,
                    }
                )
    return pd.DataFrame(rows)


def _result(full: bool, vit=lambda s, e: 95.0 + s / 10):
    cpu = pd.concat([_runs(lr, 4, 5000, "cpu") for lr in (0.0005, 0.005, 0.01)], ignore_index=True)
    if not full:
        return fixed_lr.FixedLrResult(chapters.settings(CHAPTER, "cpu"), cpu)
    settings = chapters.settings(CHAPTER, "cpu", full_protocol_lrs=(0.01,))
    return fixed_lr.FixedLrResult(settings, cpu, protocol_runs=_runs(0.01, 30, None, "paper", vit=vit))


def test_the_outputs_at_a_full_protocol_lr_read_the_paper_runs_and_say_so(figures_store):
    result = _result(full=True)
    fixed_lr.four_panel_figure(result, 0.01)
    fixed_lr.numbers_table(result, 0.01)
    fixed_lr.four_panel_figure(result, 0.005)
    outputs = read_manifest()["outputs"]
    for name in ("article1_fig5", "article1_fig5_numbers"):
        entry = outputs[name]
        assert entry["profile"] == "paper" and entry["scale"] == FULL and FULL in entry["caption"], name
        assert entry["run_ids"] and all(i.startswith("paper-") for i in entry["run_ids"])
    assert "60,000 training images × 30 epochs" in outputs["article1_fig5"]["caption"]
    cpu = outputs["article1_fig4"]
    assert cpu["profile"] == "cpu" and cpu["scale"] == "cpu: 200 of the article's 18,000 steps"
    assert all(i.startswith("cpu-") for i in cpu["run_ids"])
    # without the field, the same lr stays the profile's own
    fixed_lr.four_panel_figure(_result(full=False), 0.01)
    entry = read_manifest()["outputs"]["article1_fig5"]
    assert entry["profile"] == "cpu" and entry["scale"].startswith("cpu: 200 of")
    assert fixed_lr.scale(result.protocol_runs, "paper") == FULL


def test_each_runs_pace_at_a_full_protocol_lr_reads_the_paper_runs(figures_store, monkeypatch):
    monkeypatch.setattr(subnormals, "_record", lambda run_id: {})  # records without the step measurement
    fixed_lr.pace_table(_result(full=True), 0.01)
    entry = read_manifest()["outputs"]["article1_fig5_pace"]
    assert entry["profile"] == "paper" and FULL in entry["caption"]
    assert "no run here holds the step measurement" in entry["caption"]
    assert all(i.startswith("paper-") for i in entry["run_ids"]) and len(entry["run_ids"]) == 15


def test_a_claim_at_a_full_protocol_lr_is_judged_from_the_paper_runs(figures_store):
    plummets = lambda s, e: 90.0 + s if e < 16 else 30.0  # ViT breaks down near epoch 15, as article 1 reports
    upgraded, plain = _result(full=True, vit=plummets), _result(full=False)

    def breakdown(result):
        found = judge.experiment1(fixed_lr.evidence(result))
        return [v for v in found if v.claim == "article1/lr0.01/breakdown"]

    assert [v.outcome for v in breakdown(plain)] == [verdicts.UNTESTABLE]
    judged = breakdown(upgraded)
    assert len(judged) == 4 and all(v.outcome != verdicts.UNTESTABLE for v in judged)
    assert all(v.scale == "18,000 of the article's 18,000 steps" for v in judged)
    # 3 collapses of 3 against none of 3: counted, and no count of 3 against 3 reaches Fisher's p < 0.05
    as_run = [v for v in judged if v.condition.startswith("as run")]
    assert all(v.outcome == verdicts.NOT_DECIDABLE and (v.collapsed, v.collapsed_base) == (3, 0) for v in as_run)
    # the other lrs are still judged over the cpu runs: not testable at their scale
    found = judge.experiment1(fixed_lr.evidence(upgraded))
    at_cpu = [v for v in found if v.claim == "article1/lr0.0005/accuracy/ViTBN"]
    assert at_cpu and all(v.outcome == verdicts.UNTESTABLE for v in at_cpu)
    # the saved claims table says which runs each lr was judged over, and reads the paper runs
    fixed_lr.claims_table(upgraded)
    entry = read_manifest()["outputs"]["03_claims"]
    assert f"lr 0.01 {FULL}" in entry["scale"] and "lr 0.005 cpu: 200 of" in entry["caption"]
    assert any(i.startswith("paper-") for i in entry["run_ids"])


def test_the_book_counts_an_lr_rendered_from_paper_runs_as_the_larger_profile(tmp_path, monkeypatch):
    import json

    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from vitbn_nb.__main__ import rendering
    from vitbn_nb.publishing import book

    folder = tmp_path / "chapters"
    folder.mkdir()
    parameters = new_code_cell("profile = 'auto'\nforce = False\ntrain = True", metadata={"tags": ["parameters"]})
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Fixed lr"), parameters]), folder / "03_fixed_lr.ipynb")
    figures = tmp_path / "figures"
    figures.mkdir()
    held = {"article1_fig5": {"profile": "paper", "chapter": "03_fixed_lr", "files": []}}
    (figures / "manifest.json").write_text(json.dumps({"outputs": held}))

    class PastTheCheck(Exception):
        pass

    def past(path):
        raise PastTheCheck

    monkeypatch.setattr(book, "_check_chapter", past)  # the first step after the larger-profile check
    options = dict(notebooks_dir=folder, output_dir=tmp_path / "build", figures_dir=figures, html=False, train=False)
    options.update(runs_dir=tmp_path / "runs", rendering=rendering)  # the chapters' answer, as the book command's
    # no paper run held: a cpu rendering would replace the paper Fig 5, and is refused
    with pytest.raises(book.BookError, match="larger profile"):
        book.build_book("cpu", **options)
    # every paper run of lr 0.01 held: that lr renders from them, so the paper Fig 5 is replaced only by its like
    only_001 = lambda configs, device=None: [] if all(np.isclose(c.lr, 0.01) for c in configs) else ["missing"]
    monkeypatch.setattr(run_folder, "missing_runs", only_001)
    with pytest.raises(PastTheCheck):
        book.build_book("cpu", **options)


def test_run_keeps_the_paper_runs_apart_from_the_profiles(monkeypatch):
    def table(configs):
        return pd.DataFrame(
            [
                {
                    "run_id": c.run_id("cpu"),
                    "model": c.model,
                    "depth": c.model_kwargs.get("depth", 6 if c.model == "ViT" else 1),
                    "lr": c.lr,
                    "train_size": c.train_size,
                }
                for c in configs
            ],
            columns=["run_id", "model", "depth", "lr", "train_size"],
        )

    monkeypatch.setattr(fixed_lr.training, "train_all", lambda configs, force=False, train=True: list(configs))
    monkeypatch.setattr(fixed_lr.runs, "load_table", table)
    result = fixed_lr.run(chapters.settings(CHAPTER, "cpu", full_protocol_lrs=(0.01,)))
    paper_ids = {c.run_id("cpu") for c in _at(fixed_lr.plan(chapters.settings(CHAPTER, "paper")), 0.01)}
    assert set(result.protocol_runs["run_id"]) == paper_ids
    assert (result.table["train_size"] == 5000).all() and (result.sweep["train_size"] == 5000).all()
    assert set(fixed_lr.evidence(result).query("lr == 0.01")["run_id"]) == paper_ids
    assert fixed_lr.run(chapters.settings(CHAPTER, "cpu")).protocol_runs is None


def test_table_1_and_figure_6_read_the_paper_runs_only_once_every_lr_holds_them(figures_store):
    """Across the lrs the outputs never mix scales: the profile's runs while one lr lacks the whole protocol, the
    paper runs (and profile paper in the manifest) once all three hold it."""
    lrs = chapters.settings(CHAPTER, "cpu").lrs
    cpu = pd.concat([_runs(lr, 4, 5000, "cpu") for lr in lrs], ignore_index=True)
    one = fixed_lr.FixedLrResult(
        chapters.settings(CHAPTER, "cpu", full_protocol_lrs=(0.01,)), cpu, protocol_runs=_runs(0.01, 30, None, "paper")
    )
    table, profile = fixed_lr.across_lrs(one)
    assert profile == "cpu" and set(table["run_id"]) == set(cpu["run_id"])
    paper = pd.concat([_runs(lr, 30, None, "paper") for lr in lrs], ignore_index=True)
    every = fixed_lr.FixedLrResult(chapters.settings(CHAPTER, "cpu", full_protocol_lrs=lrs), cpu, protocol_runs=paper)
    table, profile = fixed_lr.across_lrs(every)
    assert profile == "paper" and set(table["run_id"]) == set(paper["run_id"])
    fixed_lr.ratios_table(every)
    fixed_lr.time_per_lr_table(every)
    outputs = read_manifest()["outputs"]
    assert outputs["article1_table1"]["profile"] == outputs["article1_fig6_numbers"]["profile"] == "paper"
    assert all(run_id.startswith("paper-") for run_id in outputs["article1_table1"]["run_ids"])


def _fig6_runs(times, machine=lambda model, lr: "CPU: one"):
    """As-run runs at article 1's three rates, 3 seeds, 30 epochs: ``times[model][lr]`` seconds per epoch."""
    from test_studies_fixed_lr_depth import synthetic

    depth = {"ViT": 6, "ViTBNFFN": 1, "ViTBN": 1}
    rows = [
        (model, depth[model], lr, seed, epoch, seconds * (1 + seed / 100), 1.0, 97.0, 0.1)
        for model, by_lr in times.items()
        for lr, seconds in by_lr.items()
        for seed in range(3)
        for epoch in range(1, 31)
    ]
    table = synthetic(rows)
    return table.assign(
        train_size=None, epochs=30, machine=[machine(m, lr) for m, lr in zip(table["model"], table["lr"])]
    )


def test_figure_6_is_judged_seed_by_seed_on_one_machine():
    """ViT's time moving most, ViTBN's within the article's margin, ViTBNFFN's only at lr 0.01; a seed's two rates
    timed on two machines compare nothing, and the verdict says why."""
    times = {
        "ViT": {0.0005: 80.0, 0.005: 100.0, 0.01: 130.0},
        "ViTBNFFN": {0.0005: 20.0, 0.005: 20.4, 0.01: 26.0},
        "ViTBN": {0.0005: 20.0, 0.005: 19.8, 0.01: 20.3},
    }
    found = {(v.claim): v for v in judge.fig6(_fig6_runs(times))}
    assert found["article1/fig6/vit_most/ViTBNFFN"].outcome == verdicts.AGREES
    assert found["article1/fig6/vit_most/ViTBN"].outcome == verdicts.AGREES
    assert found["article1/fig6/ViTBN/lr0.01"].outcome == verdicts.EQUIVALENT
    assert found["article1/fig6/ViTBNFFN/lr0.005"].outcome == verdicts.EQUIVALENT
    assert found["article1/fig6/ViTBNFFN/lr0.01"].outcome == verdicts.AGREES
    assert found["article1/fig6/ViTBN/lr0.01"].margin == pytest.approx(11.45)
    flat = {**times, "ViTBNFFN": {0.0005: 20.0, 0.005: 20.1, 0.01: 20.2}}
    assert {v.claim: v for v in judge.fig6(_fig6_runs(flat))}[
        "article1/fig6/ViTBNFFN/lr0.01"
    ].outcome != verdicts.AGREES
    split = judge.fig6(_fig6_runs(times, machine=lambda model, lr: "CPU: other" if lr == 0.01 else "CPU: one"))
    apart = {v.claim: v for v in split}["article1/fig6/ViTBN/lr0.01"]
    assert apart.outcome == verdicts.NOT_RUN and "no seed has these rates timed on one machine" in apart.note


def test_a_retimed_run_reads_as_its_replica_with_the_same_numbers(run_store, mnist_ready, monkeypatch):
    """A replica is the same run under another id: trained again it gives the same curve (the run is deterministic),
    and wherever it is held the chapter's table reads its rows (times from the retime plan's machine) in place of the
    original's; a replica of 0 is the run itself, its id unchanged."""
    import dataclasses

    from vitbn_nb.chapters.fixed_lr import retime
    from vitbn_nb.engines import training
    from vitbn_nb.store import runs
    from vitbn_nb.store.run_config import RunConfig

    config = RunConfig("ViTBN", {"depth": 1}, epochs=1, lr=0.01, train_size=300, test_size=200, pipeline="reference")
    again = dataclasses.replace(config, replica=1)
    assert dataclasses.replace(config, replica=0).run_id("cpu") == config.run_id("cpu") != again.run_id("cpu")
    assert "replica" not in config.to_dict() and again.to_dict()["replica"] == 1
    monkeypatch.setattr(retime, "configs", lambda: [again])
    original = runs.load_table([training.train(config, progress=False)])
    assert retime.retimed(original).equals(original)  # no replica held yet: the table as it was
    training.train(again, progress=False)
    read = retime.retimed(original)
    assert list(read["run_id"]) == [again.run_id("cpu")]
    assert list(read["test_acc"]) == list(original["test_acc"]) and list(read["train_loss"]) == list(
        original["train_loss"]
    )
    with pytest.raises(ValueError, match="replica"):
        RunConfig("ViT", replica=-1)


def test_the_retime_plan_is_what_the_committed_records_give_and_waits_for_its_machine(monkeypatch):
    """The committed retime plan is derived again from chapter 03's records: every lr 0.01 run with an epoch timed
    off the plan's machine, as a replica; the campaign trains them on that machine only."""
    from pathlib import Path

    from vitbn_nb import campaign
    from vitbn_nb.chapters.fixed_lr import retime, retime_plan
    from vitbn_nb.judging import plans
    from vitbn_nb.store import runs
    from vitbn_nb.store.run_folder import Run

    records = Path(plans.ROOT) / "figures" / "records"
    table = runs.load_table([Run(f.parent) for f in sorted(records.glob("*-lr0.0*-bs100-s*/record.json"))])
    assert retime_plan.derive(table, fixed_lr.plan(chapters.settings(CHAPTER, "paper"))) == retime.plan()
    replicas = retime.configs()
    assert replicas and all(c.replica == 1 and np.isclose(c.lr, 0.01) for c in replicas)
    stage = next(s for s in campaign.STAGES if s.retime)
    assert stage.configs() == replicas and stage.quiet
    said = []
    monkeypatch.setattr(campaign, "hardware_label", lambda device=None: "CPU: another machine")
    monkeypatch.setattr(campaign, "STAGES", (stage,))
    monkeypatch.setattr(campaign, "_epochs_done", lambda c, device, retrain=frozenset(): 0)
    monkeypatch.setattr(campaign.training, "train_all", lambda *a, **k: pytest.fail("trained off the plan's machine"))
    with pytest.raises(campaign.Unfinished):
        campaign.train(quiet=True, log=said.append)
    assert any("the retime plan's machine" in line for line in said)


def test_table_1s_caption_counts_the_gains_the_claims_page_judges(figures_store):
    """One count, two places: Table 1's caption counts exactly the gain rows (r_t, r_v) of the chapter's claims, judged
    over the same runs."""
    lrs = chapters.settings(CHAPTER, "cpu").lrs
    cpu = pd.concat([_runs(lr, 4, 5000, "cpu") for lr in lrs], ignore_index=True)
    paper = pd.concat([_runs(lr, 30, None, "paper") for lr in lrs], ignore_index=True)
    result = fixed_lr.FixedLrResult(chapters.settings(CHAPTER, "cpu", full_protocol_lrs=lrs), cpu, protocol_runs=paper)
    fixed_lr.ratios_table(result)
    caption = read_manifest()["outputs"]["article1_table1"]["caption"]
    counted = caption.split("'at least 60 %': ")[1].split(".")[0].split(", ")
    said = {words.split(" ", 1)[1]: int(words.split(" ", 1)[0]) for words in counted}
    gains = [v for v in judge.experiment1(fixed_lr.evidence(result)) if v.claim.split("/")[2] in ("r_t", "r_v")]
    assert said == pd.Series([v.outcome for v in gains]).value_counts().to_dict()
