"""``python -m vitbn_nb train``: every chapter's runs (its ``plan``, then what its optimisation chose) trained apart
from rendering, without papermill; finished runs come from the run store, so it trains only what is missing."""

from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd

from . import chapters, profiles
from .app import model_choice
from .bench.calibration import calibrated, estimate_seconds, points_for
from .data import IMAGE_SIZE
from .engines import engine, training
from .hpo import completed_trials, study_device_type
from .limits import Deadline, DeadlineReached, model_problem
from .paths import runs_dir, stored_path
from .store import bundle
from .store.records import RunStoreError, delete_fix
from .store.run_config import RunConfig
from .store.run_folder import Run, is_run_name, missing_runs, recover_swaps, stored_id
from .system import pick_device

#: Chapters whose parts measure trained runs after training, on the machine that trained: kept in the runs' records,
#: the measurements read anywhere without the weights.
MEASURED_BY = {
    "06_emnist_transfer": ("study",),
    "07_three_things": ("parallel_blocks", "attention_finetune", "hmlp_stem"),
}


def planned_runs(chapter: str, profile: str, given: dict | None = None) -> list[RunConfig]:
    """The runs ``chapter`` plans under ``profile`` and the settings ``given`` by name that it takes (an optimising
    chapter's final runs are not known before it)."""
    return list(chapters.study(chapter).plan(chapters.settings(chapter, profile, **taken(chapter, given))))


def taken(chapter: str, given: dict | None) -> dict:
    """The settings of ``given`` (``--set NAME=VALUE``, every chapter's) that ``chapter`` takes."""
    return {k: v for k, v in (given or {}).items() if k in chapters.setting_names(chapter)}


def check_given(selected: list[str], given: dict | None) -> None:
    """Refuse a setting given by name that no selected chapter takes, naming the nearest one (before anything runs)."""
    names = sorted({n for chapter in selected for n in chapters.setting_names(chapter)})
    for name in given or {}:
        if name not in names:
            raise ValueError(
                f"--set {name}: no chapter selected ({', '.join(selected)}) has a setting {name!r}"
                f"{profiles.did_you_mean(name, names)}"
            )
    for chapter in selected:  # every value checked where the settings are built
        chapters.settings(chapter, "paper", **taken(chapter, given))


def needed_weights(profile: str, store=None) -> set[str]:
    """Run ids whose weights a machine rendering ``profile`` loads (``runs export``): the app's model and the runs of
    the chapters that measure trained runs."""
    profile = profiles.resolve(profile)
    measured = [config for chapter in MEASURED_BY for config in planned_runs(chapter, profile)]
    measured += chapters.study("06_emnist_transfer").stored_runs(chapters.settings("06_emnist_transfer", profile))
    choice = model_choice(store)
    return bundle.needed_weights(measured, choice.run_id if choice else None, store)


def needs_device_check(configs: list[RunConfig]) -> bool:
    """Whether training ``configs`` here needs the device check first: on a GPU, or for a stacked run (the test suite
    proves the eager engine on a CPU)."""
    return pick_device(None).type != "cpu" or any(c.engine == "stacked" for c in configs)


def steps(config: RunConfig) -> int:
    """Training steps of a run: epochs x batches per epoch (a last batch of one image is skipped)."""
    images = config.train_size or 60_000  # MNIST's training split
    return config.epochs * engine.steps_per_epoch(images, config.batch_size)


def _plans(profile: str, selected: list[str] | None = None):
    """Each selected chapter with its settings, plan, and the trial and final runs its optimisations lead to, for
    counting and pricing only (their lr and batch size are placeholders: time per image depends on neither)."""
    for chapter in chapters.names(selected):
        settings, module = chapters.settings(chapter, profile), chapters.study(chapter)
        planned, trials, finals = module.plan(settings), [], []
        for study in getattr(planned, "optimisations", []):
            common = {
                name: getattr(study, name) for name in ("model", "model_kwargs", "dataset", "train_size", "test_size")
            }
            trials += [RunConfig(**common, epochs=study.trial_epochs, seed=t) for t in range(settings.trials)]
            pipeline = getattr(module, "RETRAIN_PIPELINE", "engine")
            finals += [
                RunConfig(**common, epochs=settings.epochs, seed=s, pipeline=pipeline) for s in range(settings.seeds)
            ]
        yield chapter, settings, planned, trials, finals


def priced_configs(profile: str, selected: list[str] | None = None) -> list[RunConfig]:
    """Every run the selected chapters train under ``profile``, optimisations included (``train --dry-run`` prices)."""
    return [c for _, _, planned, trials, finals in _plans(profile, selected) for c in [*planned, *trials, *finals]]


def plan_table(
    profile: str, selected: list[str] | None = None, price: Callable[[RunConfig], float | None] | None = None
) -> pd.DataFrame:
    """One row per chapter: its runs, training steps, optimisation trials and (with ``price``, a run's seconds left)
    the estimated hours left."""
    rows = []
    device = pick_device(None)
    for chapter, _, planned, trials, finals in _plans(profile, selected):
        missing = set(missing_runs(planned, device))
        left = [c for c in planned if stored_id(c, device) in missing]
        row = {
            "chapter": chapter,
            "runs": len(planned) + len(finals),
            "finished": len(planned) - len(left),
            "engine": ", ".join(sorted({c.engine for c in [*planned, *finals]})) or "-",
            "stacks": len({c.stack_key() for c in planned if c.stack_key() is not None}),
            "training steps": sum(steps(c) for c in [*planned, *finals]),
            "largest image": max((IMAGE_SIZE[c.dataset] for c in [*planned, *trials, *finals]), default=0),
            "trials": len(trials),
            "trial steps (batch 100)": sum(steps(c) for c in trials),
        }
        if price is not None:  # what is left: the optimisations are priced whole (their state is not read)
            seconds = sum(price(c) or 0.0 for c in [*left, *trials, *finals])
            row["estimated hours left"] = round(seconds / 3600, 1)
        rows.append(row)
    return pd.DataFrame(rows)


def untrained(profile: str = "auto", selected: list[str] | None = None) -> list[str]:
    """The selected chapters' planned runs and optimisations that neither the store nor the committed records hold."""
    profile, device = profiles.resolve(profile), pick_device(None)
    missing = []
    for _, settings, planned, _, _ in _plans(profile, selected):
        missing += missing_runs(planned, device)
        trials = getattr(settings, "trials", 1)
        for study in getattr(planned, "optimisations", []):
            folder = study.folder(study_device_type(study, device.type, trials))
            if completed_trials(folder) < trials:
                missing.append(f"the optimisation {folder.name}")
    return missing


def epoch_estimate(configs: list, log: Callable[[str], None] = print) -> Callable[[object], float | None]:
    """Seconds of one epoch of each of ``configs`` here, from one short calibration: what a deadline reads before
    it lets a run start."""
    device = pick_device(None)
    left = set(missing_runs(configs, device))
    missing = [c for c in configs if stored_id(c, device) in left]
    if not missing:
        return lambda config: None
    log("calibrating the runs left (a few training steps of each kind), so that no run starts that cannot end in time")
    points, stacked, others = points_for(missing)
    measured = calibrated(device, points=points, with_engines=stacked, others=others)
    return lambda config: estimate_seconds(config, measured, epochs=1)


def train(
    profile: str = "auto",
    selected: list[str] | None = None,
    *,
    force: bool = False,
    deadline: Deadline | None = None,
    log: Callable[[str], None] = print,
    given: dict | None = None,
) -> list[Run]:
    """Train every run of the selected chapters under ``profile`` and the settings ``given`` by name (each chapter
    takes those it has); with a ``deadline``, stop at the last epoch boundary before it
    (:class:`vitbn_nb.limits.DeadlineReached`)."""
    profile = profiles.resolve(profile)
    selected = chapters.names(selected)  # a misspelt chapter is refused before anything runs
    check_given(selected, given)
    bundle.clean_imports()  # the temporary folders of imports a kill interrupted: deleted, never read
    planned_all = [c for chapter in selected for c in planned_runs(chapter, profile, given)]
    if deadline is not None and deadline.epoch_estimate is None and not deadline.passed():
        deadline.epoch_estimate = epoch_estimate(planned_all, log)
    if needs_device_check(planned_all) and not (deadline is not None and deadline.passed()):
        from .engines import check_device  # stacked engine

        check_device.ensure(quick=profile == "smoke", log=log)
    trained = []
    for chapter in selected:
        module, settings = chapters.study(chapter), chapters.settings(chapter, profile, **taken(chapter, given))
        planned = module.plan(settings)
        log(f"{chapter}: {len(planned)} run(s)" + (f", then {planned.then}" if getattr(planned, "then", "") else ""))
        trained += training.train_all(planned, force=force, deadline=deadline)
        if hasattr(module, "after_optimisation"):
            chosen = module.after_optimisation(settings, force=force, deadline=deadline)
            trained += training.train_all(chosen, force=force, deadline=deadline)
        if MEASURED_BY.get(chapter) and deadline is not None and deadline.passed():
            raise DeadlineReached(f"{chapter}'s measurements")
        # All of a chapter's parts once begun (minutes at most): a bundle then leaves out weights its records replace.
        for part in MEASURED_BY.get(chapter, ()):
            log(f"{chapter}: measuring its trained runs on this machine ({part})")
            chapters.part(chapter, part).run(settings)
    return trained


def retrain(run_id: str, *, device=None, progress: bool = True) -> Run:
    """Train one stored run anew from its recorded configuration, into the run store (even a damaged record's)."""
    if not is_run_name(run_id):
        raise ValueError(f"run_id={run_id!r} is not a run in the run store {runs_dir()}; `runs check` lists them")
    recover_swaps()
    folder = stored_path(str(run_id))
    if not folder.is_dir() or folder.is_symlink():
        raise ValueError(
            f"run_id={run_id!r} is not a run in the run store {runs_dir()} nor among the committed records; "
            "`runs check` lists them"
        )
    try:  # no checksum check here: a record that fails it but still parses still says what to retrain
        record = json.loads((folder / "record.json").read_text())
        if (problem := model_problem(record["config"])) is not None:  # never built, not even on the meta device
            raise ValueError(problem)
        config = RunConfig(**record["config"])
    except Exception as error:
        raise RunStoreError(
            run_id,
            f"{folder / 'record.json'} is unreadable ({error}), so its configuration is unknown",
            fix=delete_fix(folder),
        ) from None
    device = pick_device(device)
    if config.run_id(device.type) != run_id:
        raise ValueError(
            f"run {run_id} was trained on another device type; on {device.type} it would be "
            f"{config.run_id(device.type)}: retrain it where it ran"
        )
    # trained beside the stored run, which it replaces once finished: a kill or a failure keeps the stored run
    return training.train(config, force=True, device=device, progress=progress)
