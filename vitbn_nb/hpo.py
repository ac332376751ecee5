"""Bayesian optimisation of lr and batch size with Ax + BoTorch (article 1, Experiment 2), one trial at a time as
the article's ``hypopt_train.py`` did; every trial is a stored run. Ax's seeded state is saved under
``runs_dir()/hpo/<study key>/`` after every suggestion and completion, so a study resumes and extends."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch

from . import atomic, profiles
from .engines import training
from .limits import Deadline
from .models import AS_RUN_DEPTH
from .models import model_kwargs as full_model_kwargs
from .paths import is_committed, runs_dir, stored_path
from .store.records import LEDGER_FILE, STATE_FILE, read_ledger, read_state, state_fix, state_problem
from .store.run_config import DEVICE_TYPES, RunConfig
from .store.run_folder import Run
from .system import pick_device

#: Article 1, Experiment 2: the search space per model.
SEARCH_SPACE = {
    "ViT": {"lr": (1e-5, 1e-3), "batch_size": (20, 120)},
    "ViTBNFFN": {"lr": (1e-5, 1e-2), "batch_size": (20, 120)},
    "ViTBN": {"lr": (1e-5, 1e-2), "batch_size": (20, 120)},
}
OBJECTIVE = "accuracy"
#: Trials Ax's default strategy spends on initialisation (centre + Sobol) before BoTorch proposes.
INITIAL_TRIALS = 5
GENERATOR_NAMES = {"CenterOfSearchSpace": "centre", "Sobol": "Sobol", "MBM": "BoTorch"}

#: Seconds the last Ax import took in this process (None until Ax is imported here).
ax_import_seconds: float | None = None


def _ax():
    """Import Ax once, quietly: its INFO log lines would flood a chapter's output."""
    global ax_import_seconds
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit deprecation warnings raised inside BoTorch
        previous = logging.root.manager.disable
        logging.disable(logging.INFO)  # Ax announces its SQL storage at import time
        try:
            from ax.api.client import Client  # heavy, optional
            from ax.api.configs import RangeParameterConfig
        finally:
            logging.disable(previous)
    if ax_import_seconds is None:
        ax_import_seconds = time.perf_counter() - start
    for handler in logging.getLogger("ax").handlers:
        handler.setLevel(logging.WARNING)
    return Client, RangeParameterConfig


def bounds(model: str) -> dict[str, tuple]:
    """The search space of ``model``: ``{"lr": (low, high), "batch_size": (low, high)}``."""
    if model not in SEARCH_SPACE:
        raise ValueError(f"model={model!r} has no search space; choose one of {', '.join(map(repr, SEARCH_SPACE))}")
    return dict(SEARCH_SPACE[model])


def parameter_configs(model: str) -> list:
    _, RangeParameterConfig = _ax()
    space = bounds(model)
    return [
        RangeParameterConfig(name="lr", bounds=space["lr"], parameter_type="float", scaling="log"),
        RangeParameterConfig(name="batch_size", bounds=space["batch_size"], parameter_type="int"),
    ]


@dataclass(frozen=True)
class Study:
    """What one optimisation trains per trial; ``key()`` names its folder under ``runs_dir()/hpo``."""

    model: str
    model_kwargs: dict = field(default_factory=dict)
    dataset: str = "mnist"
    trial_epochs: int = 3
    train_size: int | None = None
    test_size: int | None = None
    test_batch_size: int = 5000
    seed: int = 0

    def __post_init__(self):
        space = bounds(self.model)
        object.__setattr__(self, "model_kwargs", full_model_kwargs(self.model, **self.model_kwargs))
        self.trial_config(space["lr"][0], space["batch_size"][0])  # refuses a bad setting by name, now

    @property
    def depth(self) -> int:
        return self.model_kwargs["depth"]

    def trial_config(self, lr: float, batch_size: int) -> RunConfig:
        fields = {k: v for k, v in asdict(self).items() if k != "trial_epochs"}  # the rest are its trials' fields
        return RunConfig(**fields, epochs=self.trial_epochs, lr=float(lr), batch_size=int(batch_size))

    def described(self, device_type: str) -> dict:
        return {**asdict(self), "device": device_type, "search_space": SEARCH_SPACE[self.model]}

    def key(self, device_type: str) -> str:
        described = json.dumps(self.described(device_type), sort_keys=True, default=str)
        digest = hashlib.sha1(described.encode()).hexdigest()[:10]
        return f"{self.model}-d{self.depth}-{self.dataset}-e{self.trial_epochs}-s{self.seed}-{digest}"

    def folder(self, device_type: str) -> Path:
        return stored_path(f"hpo/{self.key(device_type)}")


def _save_state(client, path: Path) -> None:
    # Ax writes its JSON to a path; a crash mid-write must leave the previous state intact.
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        client.save_to_json_file(str(Path(scratch) / path.name))
        atomic.write_bytes(path, (Path(scratch) / path.name).read_bytes())


def _new_client(study: Study):
    Client, _ = _ax()
    client = Client(random_seed=study.seed)
    client.configure_experiment(parameters=parameter_configs(study.model), name=f"{study.model}-d{study.depth}")
    client.configure_optimization(objective=OBJECTIVE)
    # Ax's default strategy, with the Sobol points seeded too (the client's seed covers BoTorch).
    client.configure_generation_strategy(initialization_random_seed=study.seed)
    return client


def _load_client(study: Study, path: Path):
    Client, _ = _ax()
    try:
        state = json.loads(path.read_text())
        if problem := state_problem(path.name, state):
            raise ValueError(problem)
        client = Client.load_from_json_file(str(path))
    except Exception as error:  # Ax raises what its decoder meets: any failure means this snapshot is unusable
        reason = str(error)[:200]
        raise ValueError(f"{path} cannot be read as Ax's state ({reason}); {state_fix(path.parent)}") from None
    # The JSON snapshot does not keep the client's seed; without it BoTorch's draws would differ.
    client._random_seed = study.seed
    return client


def _trial_accuracy(run) -> float:
    """The objective Ax sees: the final test accuracy (%), rounded to 6 decimals to survive Ax's JSON exactly (a
    resumed study then suggests what an uninterrupted one would)."""
    accuracy = run.final_accuracy
    return round(float(accuracy), 6) if math.isfinite(accuracy) else 0.0


def optimise(
    study: Study,
    trials: int,
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
    train: bool = True,
) -> pd.DataFrame:
    """Run (or resume, or read back) the optimisation of ``study`` until ``trials`` trials are complete; one row per
    trial. ``force=True`` discards the stored study; ``deadline`` stops a trial at an epoch boundary (resumable);
    ``train=False``: a trial whose run is not stored is an error naming the run, never trained."""
    force = profiles.flag("force", force)
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} is not allowed; it must be an integer >= 1")
    device = pick_device(device)
    device_type = device.type if force else study_device_type(study, device.type, trials)
    folder = study.folder(device_type)
    if is_committed(folder) and (force or completed_trials(folder) < trials):
        # The committed state is read, never written: a study that goes on (or starts again) does so in the store.
        own = runs_dir() / "hpo" / folder.name
        if not force and not own.exists():
            shutil.copytree(folder, own)
        folder = own
    if force and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state_path, ledger_path = folder / STATE_FILE, folder / LEDGER_FILE
    ledger = read_ledger(ledger_path) if ledger_path.exists() else {}
    if not (folder / "study.json").exists():
        atomic.write_json(folder / "study.json", study.described(device_type))
    client = _load_client(study, state_path) if state_path.exists() else _new_client(study)
    if not state_path.exists():
        _save_state(client, state_path)

    def run_trial(index: int, parameters: dict, node: str) -> None:
        config = study.trial_config(parameters["lr"], parameters["batch_size"])
        generator = GENERATOR_NAMES.get(node, node)
        entry = ledger.setdefault(str(index), {})
        entry.update(
            trial=index + 1,
            lr=float(parameters["lr"]),
            batch_size=int(parameters["batch_size"]),
            run_id=config.run_id(device_type),
            generator=generator,
        )
        atomic.write_json(ledger_path, ledger)
        run = training.train(
            config, force=force, device=device, progress=False, mlflow=mlflow, deadline=deadline, train=train
        )
        accuracy = _trial_accuracy(run)
        client.complete_trial(index, raw_data={OBJECTIVE: accuracy})
        _save_state(client, state_path)
        # The run found may be another device type's or engine's variant of the one planned: keep the one read.
        entry.update(accuracy=accuracy, status=run.status, run_id=run.run_id)
        atomic.write_json(ledger_path, ledger)
        tags = {"hpo.study": study.key(device_type), "hpo.trial": index + 1, "hpo.generator": generator}
        training.mirror(run, mlflow, tags=tags | {"hpo.accuracy": accuracy})  # tagged as a trial, where mirrored
        if progress:
            print(
                f"{study.model} d{study.depth} trial {index + 1}/{trials} ({generator}): lr={parameters['lr']:.3g} "
                f"batch={parameters['batch_size']} -> {accuracy:.2f} %",
                flush=True,
            )

    # Suggested but never completed (the last call stopped inside it): run it now; its run resumes.
    for _, row in _trials(client, "RUNNING").iterrows():
        run_trial(int(row["trial_index"]), {"lr": row["lr"], "batch_size": row["batch_size"]}, row["generation_node"])
    completed = len(_trials(client, "COMPLETED"))
    while completed < trials:
        start = time.perf_counter()
        ((index, parameters),) = client.get_next_trials(max_trials=1).items()
        suggest_seconds = time.perf_counter() - start
        _save_state(client, state_path)  # the suggestion is kept even if its training is interrupted
        ledger[str(index)] = {"suggest_seconds": suggest_seconds}
        run_trial(index, parameters, client.summarize().set_index("trial_index").loc[index, "generation_node"])
        completed += 1
    return trial_table(study, _trials(client, "COMPLETED").head(trials), ledger, device_type)


def _trials(client, status: str) -> pd.DataFrame:
    """The study's trials of ``status`` (Ax's summary rows), in trial order."""
    summary = client.summarize()
    return summary if summary.empty else summary[summary["trial_status"] == status].sort_values("trial_index")


def completed_trials(folder: Path) -> int:
    ledger = folder / LEDGER_FILE
    return sum("accuracy" in entry for entry in read_ledger(ledger).values()) if ledger.exists() else 0


def search_complete(study: Study, trials: int, device_type: str) -> bool:
    """Whether ``study`` has ``trials`` completed trials (here or committed, of whichever device type holds them)."""
    return completed_trials(study.folder(study_device_type(study, device_type, trials))) >= trials


def read_trials(study: Study, trials: int, device_type: str) -> pd.DataFrame:
    """A complete study's first ``trials`` trials read from its ledger alone (no Ax): what its best trial is, for the
    campaign's final runs."""
    folder = study.folder(study_device_type(study, device_type, trials))
    ledger = read_ledger(folder / LEDGER_FILE)
    done = sorted((int(i), e) for i, e in ledger.items() if "accuracy" in e)[:trials]
    table = pd.DataFrame(
        [
            {"model": study.model, "depth": study.depth, "trial": e["trial"], "lr": e["lr"]}
            | {"batch_size": e["batch_size"], "accuracy": e["accuracy"], "search": study.seed, "run_id": e["run_id"]}
            for _, e in done
        ]
    )
    return table


def study_device_type(study: Study, here: str, trials: int) -> str:
    """The device type whose study this is: this device's, unless only another device completed ``trials``
    trials of it (a store trained on a GPU renders on a laptop; an unfinished study goes on where it runs)."""
    for device_type in (here, *(t for t in DEVICE_TYPES if t != here)):
        folder = study.folder(device_type)
        if (folder / LEDGER_FILE).exists() and (device_type == here or completed_trials(folder) >= trials):
            return device_type
    return here


def trial_table(study: Study, done: pd.DataFrame, ledger: dict, device_type: str) -> pd.DataFrame:
    rows = []
    for _, row in done.iterrows():
        index = int(row["trial_index"])
        entry = ledger.get(str(index), {})
        planned = study.trial_config(row["lr"], row["batch_size"]).run_id(device_type)
        run = Run(stored_path(entry.get("run_id", planned)))
        rows.append(
            {
                "model": study.model,
                "depth": study.depth,
                "dataset": study.dataset,
                "trial": index + 1,
                "lr": float(row["lr"]),
                "batch_size": int(row["batch_size"]),
                "accuracy": _trial_accuracy(run),
                "run_id": run.run_id,
                "status": run.status,
                "generator": GENERATOR_NAMES.get(row["generation_node"], row["generation_node"]),
                "suggest_seconds": entry.get("suggest_seconds", float("nan")),
                "train_seconds": sum(e["train_seconds"] + e["test_seconds"] for e in run.record["epochs"]),
                "trial_epochs": study.trial_epochs,
                "search": study.seed,
                "study": study.key(device_type),
            }
        )
    table = pd.DataFrame(rows)
    table["best_so_far"] = table["accuracy"].cummax()  # optimise completes a trial at least
    return table


# -- the chosen values ---------------------------------------------------------------------------------------


def best_trial(table: pd.DataFrame) -> pd.Series:
    """The trial with the highest accuracy (the earliest of equals) of one model's trial table."""
    if table.empty:
        raise ValueError("the trial table is empty: run the optimisation first")
    if table["model"].nunique() != 1:
        raise ValueError(f"best_trial takes one model's trials; this table holds {sorted(table['model'].unique())}")
    return table.sort_values(["accuracy", "trial"], ascending=[False, True]).iloc[0]


def best_path(dataset: str, profile: str) -> Path:
    return runs_dir() / "hpo" / f"best-{dataset}-{profile}.json"


#: What a chosen-values file keeps of each model's best trial, in its order, and as what (None: the trials counted).
_BEST_KINDS = {"lr": float, "batch_size": int, "accuracy": float, "trial": int, "trials": None, "depth": int}
_BEST_KINDS |= {"trial_epochs": int, "generator": str, "run_id": str, "study": str}


def save_best(table: pd.DataFrame, *, dataset: str, profile: str) -> Path:
    """Write each model's best trial (lr, batch size, accuracy, trial, depth ...) as JSON; return the path."""
    best = {}
    for model, trials in table.groupby("model", sort=False):
        row = best_trial(trials)
        best[model] = {key: len(trials) if kind is None else kind(row[key]) for key, kind in _BEST_KINDS.items()}
        best[model].update(dataset=dataset, profile=profile)
    path = best_path(dataset, profile)
    atomic.write_json(path, best)
    return path


def load_best(dataset: str, profile: str) -> dict | None:
    """The hyperparameters :func:`save_best` wrote (``{model: {"lr": ..., "batch_size": ...}}``), or None."""
    path = stored_path(best_path(dataset, profile).relative_to(runs_dir()))
    return read_state(path, state_fix(path)) if path.exists() else None


# -- the Ax study chapters 04 and 06 both run (06 reads 04's best settings, or optimises on its own) --------------
#: The models both chapters optimise, and the dataset chapter 04 optimises on.
MODELS = ("ViT", "ViTBNFFN", "ViTBN")
MNIST = "mnist"


def model_study(
    model: str,
    settings: profiles.ChapterSettings,
    *,
    dataset: str = MNIST,
    depth: int | None = None,
    seed: int = 0,
) -> Study:
    """The optimisation of ``model`` under a chapter's ``settings`` (its depth as article 1 ran it unless ``depth``);
    ``seed`` seeds Ax and its trials alike (a second search is the same study at another seed)."""
    sizes = {name: getattr(settings, name) for name in ("trial_epochs", "train_size", "test_size", "test_batch_size")}
    return Study(model, {"depth": depth or AS_RUN_DEPTH[model]}, dataset, **sizes, seed=seed)


def optimise_models(
    settings: profiles.ChapterSettings,
    force: bool = False,
    *,
    dataset: str = MNIST,
    depth: int | None = None,
    models=MODELS,
    deadline: Deadline | None = None,
) -> pd.DataFrame:
    """Optimise every model (resuming or reading back stored studies; ``settings.train`` says whether a trial may
    train); save the best settings; one row per trial."""
    studies = [model_study(model, settings, dataset=dataset, depth=depth) for model in models]
    tables = [optimise(s, settings.trials, force=force, deadline=deadline, train=settings.train) for s in studies]
    trials = pd.concat(tables, ignore_index=True)
    save_best(trials, dataset=dataset, profile=settings.profile)
    return trials


def best_runs(settings: profiles.ChapterSettings, best: pd.DataFrame, **fields) -> list[RunConfig]:
    """Each model of ``best`` (rows of model, depth, lr, batch size) at every seed of ``settings``; a model with no
    search space (the CNN) at its default size."""
    return [
        RunConfig.from_settings(
            settings,
            model=row["model"],
            model_kwargs={"depth": int(row["depth"])} if row["model"] in SEARCH_SPACE else {},
            lr=float(row["lr"]),
            batch_size=int(row["batch_size"]),
            seed=seed,
            **fields,
        )
        for seed in range(settings.seeds)
        for _, row in best.iterrows()
    ]


def best_hyperparameters(
    optimisation: profiles.ChapterSettings, *, dataset: str = MNIST, deadline: Deadline | None = None
) -> tuple[dict, str]:
    """Chapter 04's optimised lr and batch size per model (``runs_dir()/hpo/best-<dataset>-<profile>.json``), and
    where they came from; when the file is absent, chapter 04's optimisation (under ``optimisation``, its settings)
    runs (reusing stored trials)."""
    profile = profiles.resolve(optimisation.profile)
    best = load_best(dataset, profile)
    if best is not None:
        return best, f"read from {best_path(dataset, profile).name} (chapter 04)"
    optimise_models(optimisation, dataset=dataset, deadline=deadline)
    return load_best(dataset, profile), "chapter 04's optimisation, run now (its file was absent)"
