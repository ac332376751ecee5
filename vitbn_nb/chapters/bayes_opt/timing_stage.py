"""Chapter 04's timing rounds as ``campaign`` sees them (:mod:`.rounds` measures and reads them): when
``campaign measure`` takes them, and their state in ``campaign --dry-run``. An operation: nothing a notebook imports
imports it."""

from __future__ import annotations

from ...models import CONFIGURATIONS
from ...store.run_config import RunConfig
from ...system import host_label
from .rounds import busy, load, path, take, timed_configs

__all__ = ["campaign_take", "path", "state"]


def _missing(settings, timed: list[RunConfig]) -> set[tuple[str, int]]:
    """The models and depths of the configurations whose final runs (so whose searches) are not yet known."""
    wanted = {(m, d) for which in settings.configurations for m, d in CONFIGURATIONS[which].items()}
    return wanted - {(c.model, c.model_kwargs.get("depth")) for c in timed}


def campaign_take(settings, final: list[RunConfig], *, retake: bool = False, log=print) -> bool:
    """What ``campaign measure`` does: time the rounds once every model of the configurations has its final runs
    (``final``) and no quiet measurement of them is kept (``retake``: anew); True where it timed them."""
    timed = timed_configs(final)
    missing = _missing(settings, timed)
    if missing:
        waiting = ", ".join(f"{m} d{d}" for m, d in sorted(missing))
        log(f"{settings.chapter}: timing rounds wait for the searches of {waiting}")
        return False
    kept = load(settings, timed)
    if kept is not None and not busy(kept) and not retake:
        return False
    log(f"{settings.chapter}: timing {len(timed)} models in {settings.timing_rounds} interleaved rounds")
    take(settings, timed)
    return True


def state(settings, final: list[RunConfig], epoch_seconds=None) -> str:
    """The rounds' state in words for ``campaign --dry-run``: kept (where, when), or what they wait for and cost
    (``epoch_seconds(config)``: an epoch's estimated seconds, training and test pass)."""
    timed = timed_configs(final)
    missing = _missing(settings, timed)
    if missing:
        return f"wait for {len(missing)} search(es)"
    kept = load(settings, timed)
    if kept is not None:
        return f"taken on {host_label(kept['hardware'])}, {kept['started'][:10]}" + (" (busy)" if busy(kept) else "")
    prices = [epoch_seconds(c) for c in timed] if epoch_seconds is not None else []
    if not prices or any(p is None for p in prices):
        return "not taken (campaign measure, on a quiet machine)"
    # a turn trains its share of an epoch (the price's share of the test pass too, so the sum says the order only)
    share = settings.timing_images / (settings.train_size or 60_000)
    minutes = (settings.timing_rounds + 1) * sum(p * share for p in prices) / 60
    return f"not taken: about {minutes:.0f} min and a test pass per model and round, on a quiet machine"
