"""The ``paper`` profile trained on a CPU as a campaign over time-limited sessions: ``campaign --deadline S`` continues
the ordered :data:`STAGES` (interrupted runs first, then the cheapest that fit), ``campaign measure`` takes their
measurements, ``campaign commit`` copies finished records into ``figures/records/``."""

from __future__ import annotations

import importlib
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from . import atomic, chapters, hpo
from .bench import calibration
from .chapters.fixed_lr import retime
from .engines import training
from .limits import Deadline
from .paths import RECORDS_FOLDER, book_figures_dir, runs_dir, stored_path
from .store import provenance, runs
from .store.bundle import clean_imports, refuse_half_imported
from .store.records import ENDED, LEDGER_FILE, STATE_FOLDER, RunStoreError, read_ledger, read_record
from .store.run_config import RunConfig
from .store.run_folder import Run, is_locked, stored_id, stored_run
from .system import epoch_contended, hardware_label, machine_load, pick_device
from .train import planned_runs

PROFILE = "paper"


class Unfinished(RuntimeError):
    """The campaign stopped with runs left (a deadline, or a stage left for a quiet machine)."""


@dataclass(frozen=True)
class Stage:
    """A chapter's ``paper`` runs (those at ``lrs`` when given); ``quiet``: its epoch times are shown, so it trains
    only on a machine that runs nothing else."""

    chapter: str
    lrs: tuple[float, ...] | None = None
    quiet: bool = False
    why: str = ""
    #: ``campaign measure``'s module (a timing, so on a quiet machine): ``take(run)`` keeps a finished run's measurement
    #: in its record, ``stored(record)`` reads it, ``taken_busy(value)`` says it was taken beside other work.
    measurement: str | None = None
    #: What makes a comparison's cell besides the seed: a run on another data stream than its cell's other runs (a
    #: GPU's from before the one stream) is trained again on the one.
    cell: tuple[str, ...] = ("lr",)
    #: The chapter's committed retime plan instead of its own runs: replicas trained on the plan's machine alone.
    retime: bool = False
    #: The chapter's timing rounds as the campaign takes them (a module like
    #: :mod:`vitbn_nb.chapters.bayes_opt.timing_stage`): its models timed in interleaved rounds on one host by
    #: ``campaign measure`` (a quiet machine), once its final runs are known.
    rounds: str | None = None

    def configs(self) -> list[RunConfig]:
        """The stage's runs: its chapter's planned runs at ``lrs``; for a chapter that optimises, every trial its
        searches have suggested so far, then the final runs of each model whose first search is complete; for a
        retime stage, the replicas its plan names."""
        if self.retime:
            return retime.configs()
        planned = planned_runs(self.chapter, PROFILE)
        chosen = [c for c in planned if self.lrs is None or any(math.isclose(c.lr, lr) for lr in self.lrs)]
        return chosen + self.trials() + self.finals()

    def studies(self) -> list:
        """The searches (``hpo.Study``) of the chapter's ``paper`` plan (none for a chapter that does not optimise)."""
        planned = chapters.study(self.chapter).plan(chapters.settings(self.chapter, PROFILE))
        return list(getattr(planned, "optimisations", []))

    def trials(self) -> list[RunConfig]:
        """The trials the searches have suggested so far (their ledgers, here or committed)."""
        found = []
        for study in self.studies():
            folder = study.folder(hpo.study_device_type(study, pick_device(None).type, self.trial_count()))
            ledger = folder / LEDGER_FILE
            entries = read_ledger(ledger).values() if ledger.exists() else []
            found += [study.trial_config(e["lr"], e["batch_size"]) for e in entries if "lr" in e]
        return found

    def open_searches(self, device: torch.device) -> list:
        """The searches not yet complete (those left to run or resume)."""
        return [s for s in self.studies() if not hpo.search_complete(s, self.trial_count(), device.type)]

    def trial_count(self) -> int:
        return getattr(chapters.settings(self.chapter, PROFILE), "trials", 0)

    def finals(self) -> list[RunConfig]:
        """The final runs of the models whose first search is complete (their best trial known)."""
        module = chapters.study(self.chapter)
        if not self.studies() or not hasattr(module, "final_plan"):
            return []
        settings, device = chapters.settings(self.chapter, PROFILE), pick_device(None).type
        complete = [s for s in self.studies() if hpo.search_complete(s, settings.trials, device)]
        if not complete:
            return []
        trials = pd.concat([hpo.read_trials(s, settings.trials, device) for s in complete], ignore_index=True)
        return module.final_plan(trials, settings)

    def placeholders(self, device: torch.device) -> list[RunConfig]:
        """Stand-ins that price what the open searches will train (their trials left, at the middle of the search
        space, and the final runs of models whose first search is open, at batch 100): counted, never trained."""
        trials, found, unknown = self.trial_count(), [], []
        for study in self.open_searches(device):
            space = hpo.bounds(study.model)
            middle = (math.sqrt(space["lr"][0] * space["lr"][1]), sum(space["batch_size"]) // 2)
            done = hpo.completed_trials(study.folder(hpo.study_device_type(study, device.type, trials)))
            found += [study.trial_config(*middle)] * (trials - done)
            if study.seed == 0:
                unknown.append(
                    {"model": study.model, "depth": study.depth, "trial": 1, "lr": middle[0]}
                    | {"batch_size": 100, "accuracy": 0.0, "search": 0}
                )
        if unknown:
            module, settings = chapters.study(self.chapter), chapters.settings(self.chapter, PROFILE)
            found += module.final_plan(pd.DataFrame(unknown), settings)
        return found


#: In order: the chapters that decide the articles' claims about accuracy and stability first.
STAGES = (
    # Fig 10 pairs a seed's runs across both rates at a depth: its cell is the depth
    Stage("05_depth_study", why="article 2's depth study (Figs 8-10); shows no timings", cell=("depth",)),
    Stage(
        "03_fixed_lr",
        lrs=(0.01,),
        quiet=True,
        why="article 1's Experiment 1 at lr 0.01 (Fig 5: stability); its epoch times are shown",
        measurement="vitbn_nb.chapters.fixed_lr.subnormal_step",
    ),
    Stage(
        "03_fixed_lr",
        lrs=(0.0005, 0.005),
        quiet=True,
        why="article 1's Figs 3-4 at its protocol (accuracies, convergence, Table 1); its epoch times are shown",
    ),
    Stage(
        "03_fixed_lr",
        lrs=(0.01,),
        quiet=True,
        retime=True,
        why="article 1's lr 0.01 runs timed elsewhere, retimed on the one machine of its plan (Figs 5-6, Table 1)",
    ),
    Stage(
        "04_bayes_opt",
        quiet=True,
        why=(
            "article 1's Experiment 2 at its protocol (20-trial searches, 30-epoch retrains, as run and as written); "
            "its epoch times are shown, its gains timed in interleaved rounds"
        ),
        rounds="vitbn_nb.chapters.bayes_opt.timing_stage",
    ),
)


def run_ids() -> set[str]:
    """Every id a campaign run can have (either device type, either engine): the records a render keeps committed."""
    return {run_id for stage in STAGES for config in stage.configs() for run_id in config.ids()}


def _cell(config: RunConfig, fields: tuple[str, ...]) -> tuple:
    held = {"lr": config.lr, "depth": config.model_kwargs.get("depth"), "seed": config.seed}
    return tuple(held[name] for name in (*fields, "seed"))


def retrained(device: torch.device) -> frozenset[str]:
    """The configurations (by CPU run id) every stage trains again on the one stream: a run held on another data stream
    than its cell's other runs (:func:`vitbn_nb.store.runs.split_streams`)."""
    split = (runs.split_streams(s.configs(), lambda c, s=s: _cell(c, s.cell), device) for s in STAGES)
    return frozenset(config.run_id("cpu") for configs in split for config in configs)


def _recorded_epochs(folder, machine: str | None = None) -> list[dict]:
    """The epochs a run folder's record holds (``machine``: only those that machine trained): none without a record,
    or with one that cannot be read."""
    try:
        record = read_record(folder) if (folder / "record.json").exists() else None
    except RunStoreError:
        return []
    if record is None:
        return []
    if machine is None:
        return record["epochs"]
    return [epoch for epoch, by in zip(record["epochs"], runs.epoch_machines(record)) if by == machine]


def _epochs_done(config: RunConfig, device: torch.device, retrain: frozenset[str] = frozenset()) -> int:
    """Finished epochs of ``config`` here or committed; one in ``retrain`` counts its run on the one stream only."""
    run_id = stored_id(config, device, one_stream=config.run_id("cpu") in retrain)
    return config.epochs if stored_run(stored_path(run_id)) is not None else len(_recorded_epochs(runs_dir() / run_id))


def _trained_on(stage: Stage, device: torch.device, done: list[int] | None = None) -> dict[str, int]:
    """The machines that trained the stage's started runs, with how many each (``done``: each config's epochs)."""
    configs = stage.configs()
    done = done if done is not None else [_epochs_done(c, device) for c in configs]
    return runs.trained_on([stored_id(c, device) for c, epochs in zip(configs, done) if epochs > 0])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _all_but_seed(config: RunConfig) -> str:
    return json.dumps({**config.to_dict(), "seed": None}, sort_keys=True)


class Estimator:
    """Seconds of a run's remaining epochs: its own epochs' median, else its other seeds' median quiet epoch, else the
    calibration's price times what this store's quiet epochs really took over that price, each from the epochs this
    machine trained. ``known``: runs beside ``configs`` (a stage's finished ones) that may serve as those seeds and in
    the correction. ``beside``: the campaign's other workers, expected beside every epoch it prices (an epoch beside
    them alone is as quiet as such a campaign trains, and its calibration is kept)."""

    def __init__(
        self,
        configs: list[RunConfig],
        device: torch.device,
        calibrate: bool = True,
        known: Sequence[RunConfig] = (),
        retrain: frozenset[str] = frozenset(),
        beside: int = 0,
    ):
        self.device, self.retrain = device, retrain  # the runs trained again on the one stream: all their epochs
        self.beside = beside
        # another CPU's epochs price nothing here: the campaign's sessions land on machines of different speeds
        self.machine = hardware_label(device)
        self.load_before = machine_load()
        points, stacked, others = calibration.points_for(configs)
        self.calibration = (
            calibration.calibrated(device, points=points, with_engines=stacked, others=others, beside=self.beside)
            if calibrate and configs
            else None
        )
        self.load_after = machine_load()

        def priced(config: RunConfig) -> bool:  # a known run is compared only where this calibration prices it
            own_points, own_stacked, own_others = calibration.points_for([config])
            return {*own_points} <= {*points} and {*own_others} <= {*others} and (stacked or not own_stacked)

        self.known = [*configs, *(c for c in known if c not in configs and priced(c))]
        self._seeds: dict[str, list[RunConfig]] = {}  # the known runs by all but their seed (a RunConfig is costly)
        for config in self.known:
            self._seeds.setdefault(_all_but_seed(config), []).append(config)
        # the calibration times plain steps, without augmentation or the test pass: measured ÷ calibrated over the quiet
        # epochs here, finished runs included (a campaign's left runs are mostly unstarted)
        ratios = [
            m / c
            for config in self.known
            if (m := self._measured(config, quiet=True)) and (c := self._calibrated(config))
        ]
        self.correction = _median(ratios) or 1.0

    def busy(self) -> str:
        """A line when the calibration ran beside other work (it then prices that load), else ''."""
        busy = max(self.load_before["busy_processes"] or 0, self.load_after["busy_processes"] or 0)
        if busy <= self.beside or (self.calibration is not None and self.calibration.attrs.get("kept")):
            return ""  # quiet, or a calibration kept from a quiet machine
        return (
            f"the calibration ran while {busy} other process(es) were running (1-minute load "
            f"{self.load_after['load_1min']} on {self.load_after['cpu_cores']} cores): it prices this machine under "
            "that load, not quiet"
        )

    def epoch_seconds(self, config: RunConfig) -> float | None:
        if (measured := self._measured(config)) is not None:
            return measured
        if (seeds := self._other_seeds(config)) is not None:
            return seeds
        calibrated = self._calibrated(config)
        return None if calibrated is None else calibrated * self.correction

    def _calibrated(self, config: RunConfig) -> float | None:
        return None if self.calibration is None else calibration.estimate_seconds(config, self.calibration, epochs=1)

    def _measured(self, config: RunConfig, quiet: bool = False) -> float | None:
        """The median epoch (train and test) this machine trained of this run (``quiet``: of those trained beside no
        other work than the campaign's own workers), else None."""
        epochs = _recorded_epochs(stored_path(config.run_id(self.device.type)), self.machine)
        epochs = [e for e in epochs if "train_seconds" in e and not (quiet and epoch_contended(e, self.beside))]
        return _median([e["train_seconds"] + e["test_seconds"] for e in epochs])

    def _other_seeds(self, config: RunConfig) -> float | None:
        """The median quiet epoch of the known runs that differ from ``config`` in their seed alone, else None."""
        same = [c for c in self._seeds.get(_all_but_seed(config), ()) if c != config]
        return _median([m for c in same if (m := self._measured(c, quiet=True)) is not None])

    def seconds_left(self, config: RunConfig) -> float | None:
        per_epoch = self.epoch_seconds(config)
        left = config.epochs - _epochs_done(config, self.device, self.retrain)
        return None if per_epoch is None else left * per_epoch


def estimator(configs: list[RunConfig]) -> Estimator:
    """The estimate ``train --dry-run`` and ``campaign --dry-run`` print: ``configs`` priced on this machine."""
    device = pick_device(None)
    return Estimator(configs, device, retrain=retrained(device))


def status(estimator: Estimator | None = None) -> pd.DataFrame:
    """One row per stage: its runs finished, started and left, and the estimated hours left on this machine."""
    device = pick_device(None)
    retrain = retrained(device)
    rows = []
    for stage in STAGES:
        configs = stage.configs()
        done = [_epochs_done(c, device, retrain) for c in configs]
        row = {
            "stage": stage.chapter
            + ("" if stage.lrs is None else f" (lr {', '.join(f'{lr:g}' for lr in stage.lrs)})")
            + (" retime" if stage.retime else ""),
            "what": stage.why,
            "runs": len(configs),
            "finished": sum(d == c.epochs for d, c in zip(done, configs)),
            "started": sum(0 < d < c.epochs for d, c in zip(done, configs)),
            "epochs done": f"{sum(done):,} of {sum(c.epochs for c in configs):,}",
            "to train again (split streams)": sum(c.run_id("cpu") in retrain for c in configs),
            "trained on": "; ".join(f"{name}: {n}" for name, n in _trained_on(stage, device, done).items()) or "—",
        }
        if stage.studies():
            open_searches = stage.open_searches(device)
            row["searches complete"] = f"{len(stage.studies()) - len(open_searches)} of {len(stage.studies())}"
        if stage.rounds is not None:
            settings = chapters.settings(stage.chapter, PROFILE)
            priced = None if estimator is None else estimator.epoch_seconds
            row["timing rounds"] = importlib.import_module(stage.rounds).state(settings, stage.finals(), priced)
        if estimator is not None:
            left = [estimator.seconds_left(c) for c in configs + stage.placeholders(device)]
            row["estimated hours left"] = round(sum(s for s in left if s is not None) / 3600, 1)
        rows.append(row)
    return pd.DataFrame(rows)


def _duration(seconds: float) -> str:
    """A duration as a log line reads it: seconds under a minute (a GPU's runs), else minutes."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _order(
    units: list[list[RunConfig]], estimator: Estimator, retrain: frozenset[str] = frozenset()
) -> list[list[RunConfig]]:
    """Started units first (their checkpoints), then the cheapest: outputs of fewest hours complete soonest."""

    def key(unit):
        started = any(0 < _epochs_done(c, estimator.device, retrain) < c.epochs for c in unit)
        seconds = sum(estimator.seconds_left(c) or 0.0 for c in unit)
        return (not started, seconds)

    return sorted(units, key=key)  # stable: plan order breaks ties


def train_workers(args, deadline: Deadline | None) -> list[Run]:
    """``campaign train --workers N``: this process is worker 0 and starts N − 1 more, one thread each, on the store."""
    command = [sys.executable, "-m", "vitbn_nb", "campaign", "train", "--threads", "1", "--workers", str(args.workers)]
    seconds = [] if deadline is None else ["--deadline", f"{max(0.0, deadline.at - deadline.clock()):.0f}"]
    others = [subprocess.Popen([*command, "--worker", str(i), *seconds]) for i in range(1, args.workers)]
    try:
        return train(deadline, worker=0, workers=args.workers)
    finally:
        for process in others:
            process.wait()


def _free(unit: list[RunConfig], device: torch.device, retrain: frozenset[str]) -> bool:
    """Whether no other worker holds a run of ``unit`` (its lock taken)."""
    return not any(is_locked(stored_id(c, device, one_stream=c.run_id("cpu") in retrain)) for c in unit)


def train(
    deadline: Deadline | None = None,
    *,
    quiet: bool = False,
    log: Callable[[str], None] = print,
    worker: int = 0,
    workers: int = 1,
) -> list[Run]:
    """Continue the campaign: each stage's unfinished runs, resumed first, then cheapest first (``quiet``: the timed
    stages before the others); with a deadline, only what the estimate says finishes before it. ``workers`` > 1:
    this is worker ``worker`` of that many processes sharing the store (untimed stages only), each taking the next
    unit no other holds. Raises :class:`Unfinished`."""
    device = pick_device(None)
    clean_imports()  # the temporary folders of imports a kill interrupted: deleted, never read
    if any(c.engine == "stacked" for stage in STAGES for c in stage.configs()):  # the eager engine needs no check
        from .engines import check_device  # stacked engine

        check_device.ensure(log=log)
    trained, retrain = [], retrained(device)
    if retrain:
        log(
            f"campaign: {len(retrain)} run(s) held on another data stream than their pair's (a GPU's from before the "
            "one stream) train again on the one"
        )
    # a quiet machine is the scarce one: there the timed stages come first, the untimed ones train beside other work
    for stage in sorted(STAGES, key=lambda s: not s.quiet) if quiet else STAGES:
        left = [c for c in stage.configs() if _epochs_done(c, device, retrain) < c.epochs]
        searching = stage.open_searches(device)
        if not left and not searching:
            continue
        what = f"{len(left)} run(s)" + (f" and {len(searching)} search(es)" if searching else "")
        if stage.quiet and workers > 1:
            log(f"{stage.chapter}: {what} left for a one-worker campaign (its epoch times are shown)")
            continue
        if stage.quiet and not quiet:
            log(
                f"{stage.chapter}: {what} left, not trained: their epoch times are shown, so they train "
                "only on a quiet machine (run the campaign with --quiet and nothing else beside it)"
            )
            continue
        here = hardware_label(device)
        if stage.retime and here != retime.plan()["machine"]:
            log(
                f"{stage.chapter}: {what} left for {retime.plan()['machine']}, the retime plan's machine (here: {here})"
            )
            continue
        if stage.quiet and (elsewhere := {m: n for m, n in _trained_on(stage, device).items() if m != here}):
            log(
                f"{stage.chapter}: {sum(elsewhere.values())} of its runs were trained (and timed) on "
                f"{', '.join(elsewhere)}, not on this machine ({here}); the book compares a seed's two runs' times "
                "only where one machine timed both, so a pair split between machines leaves those comparisons"
            )
        if stage.studies():  # the first searches, then their retrains, then any further search seed
            trained += _search(stage, device, deadline, log, first=True)
            left = [c for c in stage.finals() if _epochs_done(c, device, retrain) < c.epochs]
        pending, estimator = training.units(left), None
        while pending := [u for u in pending if any(_epochs_done(c, device, retrain) < c.epochs for c in u)]:
            # (a unit another worker finished meanwhile leaves the list: training it again would do nothing)
            if estimator is None or estimator.busy():
                # a calibration taken beside other work prices that work's load: taken anew before each unit, so
                # a machine that has since gone quiet is priced quiet (and the deadline admits what truly fits)
                estimator = Estimator(
                    [c for unit in pending for c in unit],
                    device,
                    known=stage.configs(),
                    retrain=retrain,
                    beside=workers - 1,  # the other workers are expected beside it, not a busy machine
                )
                if why := estimator.busy():
                    log(f"{stage.chapter}: {why}")
            ordered = _order(pending, estimator, retrain)
            seconds = {id(unit): sum(estimator.seconds_left(c) or 0.0 for c in unit) for unit in ordered}
            fits = [u for u in ordered if deadline is None or not deadline.no_room_for(seconds[id(u)])]
            if not fits:
                log(
                    f"{stage.chapter}: {sum(map(len, ordered))} run(s) not started: each unit is estimated at "
                    f"{_duration(min(seconds.values()))} or more, and with a {deadline.margin:g}x safety margin "
                    f"that exceeds the {_duration(max(0.0, deadline.at - deadline.clock()))} left before the deadline"
                )
                break
            held = False
            if workers > 1:  # start at this worker's place in the order, then the first unit no other worker holds
                turned = fits[worker % len(fits) :] + fits[: worker % len(fits)]
                free = [u for u in turned if _free(u, device, retrain)]
                # nothing free: wait on another worker's unit under its lock, so that what it finishes reads back here
                fits, held = free or turned, not free
            unit = fits[0]
            pending.remove(unit)
            labels = ", ".join(c.label() for c in unit)
            log(
                f"{stage.chapter}: nothing free to train; waiting for {labels}, which another worker is training"
                if held
                else f"{stage.chapter}: training {labels} (estimated {_duration(seconds[id(unit)])})"
            )
            started = time.monotonic()
            trained += training.train_all(unit, deadline=deadline, one_stream=unit[0].run_id("cpu") in retrain)
            # the other worker may have stopped short (its deadline, a kill): then this one resumed what it left
            done = "its lock came free (read back, or resumed here)" if held else "finished"
            log(f"{stage.chapter}: {done} in {_duration(time.monotonic() - started)}")
        if stage.studies():
            trained += _search(stage, device, deadline, log, first=False)
    retrain = retrained(device)
    unfinished = [c for stage in STAGES for c in stage.configs() if _epochs_done(c, device, retrain) < c.epochs]
    searches = [study for stage in STAGES for study in stage.open_searches(device)]
    if unfinished or searches:
        also = f" and {len(searches)} search(es)" if searches else ""
        raise Unfinished(f"{len(unfinished)} run(s){also} left; the same command continues")
    return trained


def _search(
    stage: Stage, device: torch.device, deadline: Deadline | None, log: Callable[[str], None], *, first: bool
) -> list[Run]:
    """Run (or resume) the searches of ``stage`` not yet complete (``first``: the retrained first searches, else the
    further search seeds), cheapest first, while a trial fits before the deadline (a trial stops at an epoch boundary
    and resumes); returns the trials' runs."""
    trials = stage.trial_count()
    open_studies = [s for s in stage.open_searches(device) if (s.seed == 0) == first]
    if not open_studies:
        return []
    probes = [s.trial_config(*(hpo.bounds(s.model)[name][1] for name in ("lr", "batch_size"))) for s in open_studies]
    estimator = Estimator(probes, device)
    done = []
    cost = lambda pair: (pair[0].seed, estimator.epoch_seconds(pair[1]) or 0.0)
    for study, probe in sorted(zip(open_studies, probes), key=cost):
        # priced at the search space's largest batch: smaller batches take more steps, so a trial may run longer
        trial_seconds = (estimator.epoch_seconds(probe) or 0.0) * study.trial_epochs
        if deadline is not None and deadline.no_room_for(trial_seconds):
            log(f"{stage.chapter}: search {study.key(device.type)} not started: a trial does not fit the deadline")
            continue
        left = trials - hpo.completed_trials(study.folder(hpo.study_device_type(study, device.type, trials)))
        log(f"{stage.chapter}: searching {study.model} d{study.depth} (seed {study.seed}): {left} trial(s) left")
        table = hpo.optimise(study, trials, deadline=deadline)
        done += [Run(stored_path(run_id)) for run_id in table["run_id"]]
    return done


def measure(*, retake: bool = False, log: Callable[[str], None] = print) -> list[str]:
    """Take each stage's measurement of its finished runs with weights here whose record lacks it or holds one taken
    beside other work (``retake``: all anew); returns the runs measured."""
    device, measured, weightless = torch.device("cpu"), [], 0
    for stage in STAGES:
        if stage.rounds is not None:
            settings = chapters.settings(stage.chapter, PROFILE)
            if importlib.import_module(stage.rounds).campaign_take(settings, stage.finals(), retake=retake, log=log):
                measured.append(f"{stage.chapter} timing rounds")
        if stage.measurement is None:
            continue
        module = importlib.import_module(stage.measurement)
        for config in stage.configs():
            folder = runs_dir() / stored_id(config, device)
            run = stored_run(folder)
            if run is None or run.status != "finished":
                continue
            held = module.stored(run.record)
            if held is not None and not module.taken_busy(held["value"]) and not retake:
                continue
            if not (folder / "model.pt").exists():
                weightless += 1
                continue
            log(f"{stage.chapter}: measuring {config.label()} ({module.__name__.rsplit('.', 1)[-1]})")
            module.take(run, retake=retake or held is not None)
            measured.append(run.run_id)
    note = f"; {weightless} finished run(s) without weights here left unmeasured" if weightless else ""
    log(f"campaign: {len(measured)} run(s) measured{note} (`campaign commit` copies their records)")
    return measured


def _beyond_measurements(committed: dict, stored: dict) -> bool:
    """Whether ``stored`` differs from ``committed`` in more than measurements added to it (``campaign measure``
    keeps a finished run's measurement in its record; nothing else of an ended run may change). A committed record
    of a run that had not ended is no evidence (the chapters read ended runs alone): its run, finished, takes its
    place."""
    if committed.get("status") not in ENDED:
        return False
    held, kept = committed.get("measurements", {}), stored.get("measurements", {})
    if any(kept.get(name) != value for name, value in held.items()):
        return True
    strip = lambda record: {k: v for k, v in record.items() if k not in ("measurements", "record_sha256")}
    return strip(committed) != strip(stored)


def commit(log: Callable[[str], None] = print, replace: set[str] = frozenset()) -> list[str]:
    """Copy every finished campaign run's record (no weights) from the run store into ``figures/records/``. A store
    run whose record differs from its committed one beyond measurements added is refused, both named, unless its
    id is in ``replace``; nothing is copied then."""
    target = book_figures_dir() / RECORDS_FOLDER
    refuse_half_imported(runs_dir(), "its records would be committed incomplete")
    copied, writes, refused, untrusted = [], [], [], []
    device = pick_device(None)
    for stage in STAGES:
        for config in stage.configs():
            run_id = stored_id(config, device)
            source, destination = runs_dir() / run_id, target / run_id / "record.json"
            if (run := stored_run(source)) is None:  # ended runs only
                continue
            text = (source / "record.json").read_text()
            held = destination.read_text() if destination.exists() else None
            if held == text:
                continue
            if (trust := provenance.status(source, run.record)) in (provenance.UNVERIFIED, provenance.REFUSED):
                untrusted.append((run_id, trust))
                continue
            if held is not None and run_id not in replace and _beyond_measurements(json.loads(held), json.loads(text)):
                refused.append(run_id)
                continue
            writes.append((destination, text))
            if trust == provenance.VERIFIED:  # the replay's note goes with it: the claims page says where
                writes.append((destination.parent / provenance.FILE, (source / provenance.FILE).read_text()))
            copied.append(run_id)
    if untrusted:
        (first, trust), others = untrusted[0], [run_id for run_id, _ in untrusted[1:]]
        more = f" (and {len(others)} more: {', '.join(others)})" if others else ""
        why = "was imported and not yet replayed" if trust == provenance.UNVERIFIED else "did not replay"
        raise RunStoreError(
            first,
            f"{runs_dir() / first} {why}, so its record is not trusted{more}; nothing was committed",
            f"fix: `python -m vitbn_nb runs verify {first}` (it replays the run's first epoch and tests its weights)"
            + ("" if trust == provenance.UNVERIFIED else ", or train it here and commit that"),
        )
    if refused:
        first = refused[0]
        others = f" (and {len(refused) - 1} more: {', '.join(refused[1:])})" if len(refused) > 1 else ""
        raise RunStoreError(
            first,
            f"{runs_dir() / first / 'record.json'} differs from its committed record {target / first / 'record.json'} "
            f"beyond added measurements{others}; nothing was committed",
            f"fix: find why, then `python -m vitbn_nb campaign commit --replace {first}` for each run to replace (and "
            "say so in the commit message)",
        )
    for destination, text in writes:
        destination.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(destination, text)
    if replaced := sorted(set(copied) & set(replace)):
        log(f"campaign: replaced the committed record(s) of {', '.join(replaced)} (--replace): say so in the commit")
    for stage in STAGES:  # the searches' state: what their trials and best settings are read from
        for study in stage.studies():
            source = runs_dir() / STATE_FOLDER / study.key(device.type)
            if not (source / LEDGER_FILE).is_file() or source.is_symlink():
                continue
            for file in sorted(source.glob("*.json")):
                destination = target / STATE_FOLDER / source.name / file.name
                if file.is_symlink() or (destination.exists() and destination.read_bytes() == file.read_bytes()):
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                atomic.write_bytes(destination, file.read_bytes())
                copied.append(f"{STATE_FOLDER}/{source.name}/{file.name}")
    for stage in STAGES:  # the timing rounds, kept beside the searches they time
        if stage.rounds is not None and (source := importlib.import_module(stage.rounds).path(PROFILE)).is_file():
            destination = target / STATE_FOLDER / source.name
            same = destination.exists() and destination.read_bytes() == source.read_bytes()
            if not source.is_symlink() and not same:
                destination.parent.mkdir(parents=True, exist_ok=True)
                atomic.write_bytes(destination, source.read_bytes())
                copied.append(f"{STATE_FOLDER}/{source.name}")
    # the claims page counts the committed records: a records commit without it leaves the README's check red
    after = "; then `python -m vitbn_nb readme`, and commit its pages with them" if copied else ""
    log(f"campaign: {len(copied)} finished run record(s) and search file(s) copied into {target} (commit them{after})")
    return copied
