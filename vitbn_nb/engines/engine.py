"""The training engine: Adam + cross-entropy, a test pass after every epoch, honest timings; every epoch seeded from
``(seed, epoch)`` so a resumed run continues exactly. No ``torch.compile``: on the book's 2-core CPU it took 8-21 s to
compile for a step within ±3 % of eager, while a ``cpu`` chapter runs ~500-1,000 steps per model."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from .. import timing
from ..data import Batches
from ..system import OtherWork, machine_load, nondeterminism_recorded, pick_device, watch_determinism


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch * 7_919) % (2**63)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of a run's data in one epoch (order and augmentation): on the CPU whatever the training device,
    so a seed's data are one stream on every device and engine (:data:`vitbn_nb.data.sets.STREAM`)."""
    return torch.Generator().manual_seed(epoch_seed(seed, epoch))


def progress_bar(total: int, initial: int, desc: str | None, enabled: bool):
    """A tqdm bar of training steps; tqdm's own ``TQDM_DISABLE=1`` hides every one (a log file's view)."""
    hidden = {} if enabled else {"disable": True}  # given only to hide: tqdm reads TQDM_* for what is not given
    return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=2.0, leave=True, **hidden)


def steps_per_epoch(images: int, batch_size: int) -> int:
    """Training steps per epoch: the engine skips a last batch of one image (a BatchNorm cannot train on it)."""
    return images // batch_size + (1 if images % batch_size >= 2 else 0)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor) -> Tensor:
    """One Adam step on cross-entropy; returns the batch's mean loss, detached and still on the device."""
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_data: Batches,
    *,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device,
    bar: tqdm | None = None,
    item_per_step: bool = False,
) -> dict:
    """One pass over ``train_data``: mean per-image loss, wall seconds (data included) and data seconds.
    ``item_per_step`` reads every step's loss back to the host, as article 1's loop did (a GPU then waits each step)."""
    model.train()
    loss_sum = torch.zeros((), device=device)
    seen = 0
    epoch = TimedBatches(train_data.batches(batch_size, generator=generator, shuffle=True, min_batch=2), device, bar)
    with watch_determinism():
        for x, y in epoch:
            loss = train_step(model, optimizer, x, y)
            if item_per_step:
                loss = loss.item()
            loss_sum += loss * len(y)  # the engine sums on the device: no host sync per step
            seen += len(y)
    return {"train_loss": (loss_sum / max(seen, 1)).item(), **epoch.timings, **nondeterminism_recorded()}


class TimedBatches:
    """An epoch's batches, timed with no host sync per step; once iterated, ``timings`` holds wall and data seconds,
    the device's peak memory and the machine's load."""

    def __init__(self, batches: Iterable, device: torch.device, bar: tqdm | None = None):
        self.batches, self.device, self.bar = batches, device, bar
        self.timings: dict = {}

    def __iter__(self) -> Iterator:
        fetching, cuda = timing.Intervals(self.device), self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        other_work, start = OtherWork(), timing.clock(self.device)
        batches = iter(self.batches)
        while True:
            fetching.start()
            try:
                batch = next(batches)
            except StopIteration:
                break
            fetching.stop()
            yield batch  # the step runs here, inside the epoch's clock
            if self.bar is not None:
                self.bar.update()
        self.timings = {
            "train_seconds": timing.clock(self.device) - start,
            "data_seconds": fetching.seconds(),
            # the GPU's peak since the reset above; none on the CPU (the process's high-water mark is not the run's)
            "peak_memory_mib": round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1) if cuda else None,
            **machine_load(),
            "other_cpu_seconds": other_work.seconds(),  # the other processes' CPU time while this epoch trained
        }


def count_classes(logits: Tensor, y: Tensor, correct: Tensor, total: Tensor) -> None:
    """Add a batch's per-class hits and counts on the device (``index_add_``: a boolean index would sync per batch)."""
    hit = logits.argmax(dim=1) == y
    total.index_add_(0, y, torch.ones_like(y, dtype=total.dtype))
    correct.index_add_(0, y, hit.to(correct.dtype))


def count_classes_per_sample(logits: Tensor, y: Tensor, correct: list, total: list) -> None:
    """The reference code's bookkeeping (``mlflow_modules/train_mnist.py`` at commit 74b1791, the Experiment-1
    script): a Python loop over the samples, one ``.item()`` per label and guess, inside the timed test pass."""
    for label, guess in zip(y, logits.argmax(dim=1)):
        total[label.item()] += 1
        correct[label.item()] += int(label.item() == guess.item())


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    test_data: Batches,
    *,
    batch_size: int = 5000,
    num_classes: int = 10,
    device: torch.device | None = None,
    per_sample: bool = False,
) -> dict:
    """Accuracy and per-class accuracy (%) and the pass's seconds; ``per_sample``: counted as the reference code did."""
    device = device or next(model.parameters()).device
    model.eval()
    if per_sample:
        correct, total, count = [0] * num_classes, [0] * num_classes, count_classes_per_sample
    else:
        correct, total = torch.zeros(num_classes, device=device), torch.zeros(num_classes, device=device)
        count = count_classes
    start = timing.clock(device)
    for x, y in test_data.batches(batch_size):
        count(model(x), y, correct, total)
    seconds = timing.clock(device) - start
    if per_sample:  # the Python counts as float64: the same arithmetic as on the ints
        correct, total = torch.tensor(correct, dtype=torch.float64), torch.tensor(total, dtype=torch.float64)
    accuracy = 100 * correct.sum().item() / max(total.sum().item(), 1)
    class_acc = (100 * correct / total.clamp(min=1)).tolist()
    return {"test_acc": accuracy, "class_acc": class_acc, "test_seconds": seconds}


def tested(evaluate: Callable[[], dict]) -> dict:
    """``evaluate()``'s metrics with the other processes' CPU seconds over it (``test_other_cpu_seconds``), which flag
    a test pass timed beside other work (:func:`vitbn_nb.system.epoch_contended`)."""
    other_work = OtherWork()
    metrics = evaluate()
    return {**metrics, "test_other_cpu_seconds": other_work.seconds()}


def train_model(
    model: nn.Module,
    train_data: Batches,
    test_data: Batches,
    *,
    epochs: int,
    lr: float,
    batch_size: int = 100,
    test_batch_size: int = 5000,
    seed: int = 0,
    num_classes: int = 10,
    device: str | torch.device | None = None,
    start_epoch: int = 0,
    optimizer_state: dict | None = None,
    per_sample_eval: bool = False,
    item_per_step: bool = False,
    on_epoch_end: Callable[[dict, nn.Module, torch.optim.Optimizer], None] | None = None,
    stop: Callable[[dict], bool] | None = None,
    progress: bool = True,
    desc: str | None = None,
) -> list[dict]:
    """Train with Adam and cross-entropy, testing after every epoch; returns one dict per epoch from ``start_epoch + 1``
    (``train_loss``, ``test_acc``, ``class_acc``, ``train_seconds``, ``data_seconds``, ``test_seconds``, ``diverged``).
    A non-finite loss ends training with ``diverged=True``; ``stop(metrics)`` ends it after ``on_epoch_end``."""
    device = pick_device(device)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    steps = math.ceil(len(train_data) / batch_size)
    train_options = dict(batch_size=batch_size, device=device, item_per_step=item_per_step)
    test_options = dict(batch_size=test_batch_size, num_classes=num_classes, device=device, per_sample=per_sample_eval)
    history = []
    with progress_bar(epochs * steps, start_epoch * steps, desc, progress) as bar:
        for epoch in range(start_epoch + 1, epochs + 1):
            torch.manual_seed(epoch_seed(seed, epoch))  # dropout and torchvision's transforms draw from here
            generator = epoch_generator(seed, epoch)
            trained = train_epoch(model, optimizer, train_data, generator=generator, bar=bar, **train_options)
            metrics = {"epoch": epoch, **trained, "diverged": not math.isfinite(trained["train_loss"])}
            metrics.update(tested(lambda: evaluate(model, test_data, **test_options)))
            bar.set_postfix(epoch=epoch, loss=f"{metrics['train_loss']:.4f}", acc=f"{metrics['test_acc']:.2f}%")
            history.append(metrics)
            if on_epoch_end is not None:
                on_epoch_end(metrics, model, optimizer)
            if metrics["diverged"]:
                bar.write(
                    f"{desc or 'run'}: loss became {metrics['train_loss']} at epoch {epoch}; recorded as diverged"
                )
                break
            if stop is not None and epoch < epochs and stop(metrics):
                break
    return history
