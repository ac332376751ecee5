"""Chapter 04's timing rounds (Table 3): what they judge, what they keep, and what they refuse."""

import json

import pandas as pd
import pytest

from vitbn_nb import chapters
from vitbn_nb.chapters.bayes_opt import judge, rounds, timing_plan, timing_stage
from vitbn_nb.chapters.bayes_opt import study as bayes_opt
from vitbn_nb.judging import plans, verdicts
from vitbn_nb.store.run_config import RunConfig

PAPER = chapters.settings("04_bayes_opt", "paper")
HOST = {"device": "cpu", "cpu": "Test CPU", "cpu_cores": 2, "torch_threads": 2, "host": "0123456789ab"}


def _configs(settings, which=("as run",)):
    """Seed-0 retrains of ``which``'s models (ViT d6 once), at made-up best settings."""
    found = []
    for model, depth in bayes_opt.protocol.studies(which):
        found += [
            RunConfig.from_settings(
                settings, model=model, model_kwargs={"depth": depth}, lr=1e-3, batch_size=50, seed=seed,
                dataset="mnist", pipeline="reference",
            )
            for seed in range(2)
        ]  # fmt: skip
    return found


def _measured(settings, configs, seconds: dict, other_cpu_seconds=0.0) -> dict:
    """A kept measurement of ``configs`` with ``seconds[model] = (train, test)`` per round."""
    timed = rounds.timed_configs(configs)
    return {
        "schema": rounds.SCHEMA,
        "rounds": settings.timing_rounds,
        "images": settings.timing_images,
        "runs": sorted(c.run_id("cpu") for c in timed),
        "hardware": HOST,
        "started": "2026-12-08T01:00:00+00:00",
        "seconds": 100.0,
        "other_cpu_seconds": other_cpu_seconds,
        "models": [
            {
                "model": c.model, "depth": c.model_kwargs["depth"], "run_id": c.run_id("cpu"), "lr": c.lr,
                "batch_size": c.batch_size, "pipeline": c.pipeline, "images": 6000, "train_images": 60000,
                "test_images": 10000, "train_seconds": list(seconds[c.model][0]),
                "test_seconds": list(seconds[c.model][1]),
            }
            for c in timed
        ],
    }  # fmt: skip


def _keep(run_store, measured: dict, profile="paper"):
    path = run_store / "hpo" / f"timing-{profile}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measured))
    return path


def test_each_rounds_gain_pairs_a_model_with_vits_turn_in_the_same_round(run_store):
    configs = _configs(PAPER)
    n = PAPER.timing_rounds
    vit = ([10.0, 20.0] * (n // 2), [4.0] * n)  # a busy spell doubles every model's second turn alike
    bn = ([2.0, 4.0] * (n // 2), [1.0] * n)
    measured = _measured(PAPER, configs, {"ViT": vit, "ViTBNFFN": bn, "ViTBN": bn})
    timed = rounds.frame(measured)
    # seconds of a whole epoch at each turn's pace
    assert set(timed.loc[timed["model"] == "ViT", "train_seconds"]) == {100.0, 200.0}
    gains = rounds.round_gains(timed, ("ViTBN", 1), ("ViT", 6), "r_t")
    assert len(gains) == n and gains.round(6).eq(80.0).all()  # paired by round: 1 - 2/10 and 1 - 4/20
    no_retrains = pd.DataFrame(columns=["run_id", "model", "depth", "seed", "epoch", "batch_size", "test_acc"])
    found = [v for v in judge.experiment2(no_retrains, "as run", timed) if "/r_" in v.claim]
    assert [(v.outcome, v.each, v.seeds) for v in found] == [(verdicts.AGREES, "round", n)] * 4
    assert all("on host 0123456789ab" in v.scale and "20 interleaved rounds" in v.condition for v in found)
    assert all(v.first_started == "2026-12-08T01:00:00+00:00" for v in found)  # what the plan's label compares
    # taken after the committed timing plan at its protocol: confirmatory; a smaller profile's rounds never are
    assert {plans.label(v).evidence for v in found} == {plans.CONFIRMATORY}
    cpu = chapters.settings("04_bayes_opt", "cpu")
    smaller = rounds.frame(_measured(cpu, _configs(cpu), {"ViT": vit, "ViTBNFFN": bn, "ViTBN": bn}))
    labelled = [plans.label(v) for v in judge.experiment2(no_retrains, "as run", smaller) if "/r_" in v.claim]
    assert {v.evidence for v in labelled} == {plans.EXPLORATORY}
    assert "20 rounds of 1,000 images, where the plan fixed 20 of 6,000" in labelled[0].note


def test_a_measurement_of_other_settings_is_not_read_and_a_damaged_one_is_refused_by_name(run_store):
    configs = _configs(PAPER)
    n = PAPER.timing_rounds
    seconds = {m: ([1.0] * n, [1.0] * n) for m in ("ViT", "ViTBNFFN", "ViTBN")}
    path = _keep(run_store, _measured(PAPER, configs, seconds))
    assert rounds.load(PAPER, rounds.timed_configs(configs)) is not None
    other = [c for c in _configs(PAPER) if c.seed == 0]
    other[1] = RunConfig.from_settings(PAPER, **{**other[1].to_dict(), "lr": 2e-3})  # another best lr: not these rounds
    assert rounds.load(PAPER, other) is None
    broken = _measured(PAPER, configs, seconds)
    broken["models"][0]["train_seconds"] = [1.0] * (n - 1)
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"timing-paper\.json: ViT: train_seconds does not hold one value per round"):
        rounds.load(PAPER, rounds.timed_configs(configs))
    hostile = _measured(PAPER, configs, seconds)
    hostile["started"] = "2026-12-08\x1b[31m; rm -rf"  # reaches captions: refused, not shown
    path.write_text(json.dumps(hostile))
    with pytest.raises(ValueError, match=r"timing-paper\.json: it does not say which machine took it, or when"):
        rounds.load(PAPER, rounds.timed_configs(configs))
    path.write_text(" " * (rounds.MAX_BYTES + 1))
    with pytest.raises(ValueError, match="bytes is no timing measurement"):
        rounds.load(PAPER, rounds.timed_configs(configs))
    path.write_text("{not json")
    with pytest.raises(ValueError, match="timing-paper.json: the timing measurement cannot be read"):
        rounds.load(PAPER, rounds.timed_configs(configs))


def test_the_campaign_times_the_rounds_only_once_every_search_is_done_and_retakes_a_busy_one(run_store, monkeypatch):
    taken = []
    monkeypatch.setattr(timing_stage, "take", lambda settings, configs: taken.append(len(configs)))
    as_run = [c for c in _configs(PAPER) if c.model == "ViT" or c.model_kwargs["depth"] == 1]
    log = []
    assert not timing_stage.campaign_take(PAPER, as_run, log=log.append)  # the as-written searches are not done
    assert taken == [] and "wait for the searches of ViTBN d6, ViTBNFFN d6" in log[0]
    every = _configs(PAPER, ("as run", "as written"))
    assert timing_stage.campaign_take(PAPER, every, log=log.append) and taken == [5]
    n = PAPER.timing_rounds
    seconds = {m: ([1.0] * n, [1.0] * n) for m in ("ViT", "ViTBNFFN", "ViTBN")}
    _keep(run_store, _measured(PAPER, every, seconds))
    assert not timing_stage.campaign_take(PAPER, every, log=log.append)  # kept, taken quietly
    _keep(run_store, _measured(PAPER, every, seconds, other_cpu_seconds=50.0))  # half a core beside it
    assert timing_stage.campaign_take(PAPER, every, log=log.append) and taken == [5, 5]
    state = timing_stage.state(PAPER, every)
    assert state.startswith("taken on CPU: Test CPU (2 cores) on host 0123456789ab, 2026-12-08")


def test_the_committed_timing_plan_is_the_paper_protocols_and_a_protocol_it_did_not_fix_fails_loudly():
    assert rounds.plan() == json.loads(json.dumps(timing_plan.derive(PAPER)))
    with pytest.raises(ValueError, match=r"timing_rounds=10 differs from the timing plan's 20 \(timing_plan.json\)"):
        bayes_opt.plan(chapters.settings("04_bayes_opt", "paper", timing_rounds=10))
    with pytest.raises(ValueError, match="timing_images=0 is not allowed"):
        chapters.settings("04_bayes_opt", "smoke", timing_images=0)
