"""Chapter 03: how long each model takes to reach a test accuracy (at an epoch's end); each model against ViT by the
book's rule on the seconds each took, seeds paired (a seed timed beside other work leaves that comparison)."""

from __future__ import annotations

import itertools
import math

import pandas as pd

from ...judging import verdicts
from ...judging.claims import BN_MODELS, hardware_of, steps_per_epoch
from ...judging.selection import machines, shown_machine, timed_busy
from ...models import CONFIGURATIONS
from ...publishing import figures, results

#: Test accuracies (%) a practitioner might train to; the smaller profiles reach the lower ones.
TARGETS = (80.0, 90.0, 95.0)


def per_run(table: pd.DataFrame, targets=TARGETS) -> pd.DataFrame:
    """Per run and target: epoch, steps and training seconds to first reach it (NaN: never), whether an epoch up to it
    was timed beside other work (``busy``), and the one machine that timed those epochs (else None); seconds are NaN
    where it is busy or has no one machine."""
    rows = []
    for run_id, run in table.groupby("run_id", sort=False):
        run = run.sort_values("epoch")
        first, per_epoch = run.iloc[0], steps_per_epoch(run)
        seconds = run["train_seconds"].cumsum().to_numpy()
        busy = timed_busy(run).tolist()
        timed_on = machines(run).tolist()
        accuracy = run["test_acc"].to_numpy()
        for target in targets:
            hit = next((i for i, value in enumerate(accuracy) if value >= target), None)
            timed_busy_before = hit is not None and any(busy[: hit + 1])
            # seconds summed over two machines (or an unknown one) time neither: the run has no seconds for it
            machine = None if hit is None or len(set(timed_on[: hit + 1])) > 1 else timed_on[hit]
            rows.append(
                {
                    "run_id": run_id,
                    "model": first["model"],
                    "depth": int(first["depth"]),
                    "lr": float(first["lr"]),
                    "seed": int(first["seed"]),
                    "target": target,
                    "epochs_trained": len(run),
                    "epoch": math.nan if hit is None else int(run["epoch"].iloc[hit]),
                    "steps": math.nan if hit is None else (hit + 1) * per_epoch,
                    "seconds": math.nan if machine is None or timed_busy_before else float(seconds[hit]),
                    "busy": timed_busy_before,
                    "machine": machine,
                    "steps_trained": len(run) * per_epoch,
                }
            )
    return pd.DataFrame(rows)


def _runs_of(reached: pd.DataFrame, model: str, depth: int, lr: float, target: float) -> pd.DataFrame:
    keep = (reached["model"] == model) & (reached["depth"] == depth) & (reached["target"] == target)
    return reached[keep & ((reached["lr"] - lr).abs() < 1e-12)].set_index("seed").sort_index()


def comparison(reached: pd.DataFrame, model: str, depth: int, lr: float, target: float, hardware: str):
    """``model`` at ``depth`` against ViT d6, seconds to ``target``, by the rule, seeds paired on one machine."""
    vit = _runs_of(reached, "ViT", 6, lr, target)[["seconds", "machine"]]
    other = _runs_of(reached, model, depth, lr, target)[["seconds", "machine"]]
    both = vit.join(other, lsuffix="_vit", rsuffix="_model", how="inner").dropna()
    both = both[both["machine_vit"] == both["machine_model"]]  # a seed's two runs timed by one machine
    claim = f"{model} d{depth} against ViT d6, seconds to {target:g} %, lr {lr:g}"
    return verdicts.speed_ratio(
        claim, list(1 / both["seconds_model"]), list(1 / both["seconds_vit"]), scale=hardware, each="seed"
    )


#: The column counting the runs that reached a target but whose seconds to it are not shown.
LEFT_OUT = "runs whose seconds are left out (timed beside other work, or not on the machine shown)"


def summary(result) -> pd.DataFrame:
    """Per lr, configuration, BatchNorm model and target: median steps and seconds to it, and the rule's verdict."""
    table = result.table
    reached = per_run(table)
    hardware = hardware_of(table)
    # the seconds shown are one machine's (a median never pools two); the verdict pairs each seed on its own machine
    on_shown = reached["machine"] == shown_machine(table)
    shown = reached.assign(seconds=reached["seconds"].where(on_shown))
    rows = []
    grid = itertools.product(sorted(reached["lr"].unique()), CONFIGURATIONS.items(), BN_MODELS, TARGETS)
    for lr, (which, depths), model, target in grid:
        vit = _runs_of(shown, "ViT", 6, lr, target)
        other = _runs_of(shown, model, depths[model], lr, target)
        if vit.empty or other.empty:
            continue
        judged = comparison(reached, model, depths[model], lr, target, hardware)
        rows.append(
            {
                "lr": lr,
                "configuration": which,
                "target (%)": target,
                "ViT d6: steps": _median(vit["steps"]),
                "ViT d6: seconds": _median(vit["seconds"], 1),
                "ViT d6: seeds reaching it": f"{vit['steps'].notna().sum()} of {len(vit)}",
                "model": f"{model} d{depths[model]}",
                "model: steps": _median(other["steps"]),
                "model: seconds": _median(other["seconds"], 1),
                "model: seeds reaching it": f"{other['steps'].notna().sum()} of {len(other)}",
                "T(ViT) / T(model), by the rule": "not reached by both in any seed"
                if judged.outcome == verdicts.NOT_RUN
                else verdicts.speed_text(judged),
                LEFT_OUT: int(_left_out(vit) + _left_out(other)),
            }
        )
    return pd.DataFrame(rows)


def _left_out(runs: pd.DataFrame) -> int:
    """Runs that reached the target but whose seconds to it are not shown."""
    return int((runs["steps"].notna() & runs["seconds"].isna()).sum())


def _median(values: pd.Series, digits: int = 0):
    values = values.dropna()
    if values.empty:
        return "not reached"
    value = float(values.median())
    return int(value) if digits == 0 else round(value, digits)


def table(result):
    """``03_time_to_accuracy``: steps and training seconds to 80, 90 and 95 % test accuracy, per configuration."""
    reached = per_run(result.table)
    steps = int(reached["steps_trained"].min()) if len(reached) else 0
    caption = (
        f"Training steps and seconds until the test accuracy first reached each target (at an epoch's end; "
        f"median over the seeds that reached it), ViT depth 6 against each BatchNorm model in both configurations, "
        f"after at most {steps:,} steps; seconds shown on {shown_machine(result.table) or hardware_of(result.table)} "
        "(the ratio pairs each seed where one machine timed both runs), "
        f"{results.contention(result.table)} timed beside other work (a run with one before a target has no seconds "
        "for it); "
        f"{int(result.table['seed'].nunique())} seed(s) per configuration"
    )
    return figures.save_table(
        summary(result), "03_time_to_accuracy", result, reproduces="new/time_to_accuracy", caption=caption
    )
