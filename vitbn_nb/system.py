"""What machine and which libraries produced a result (recorded with every run and figure), and determinism on a
GPU: the settings, and what a run records when torch calls a kernel it ran nondeterministic."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import numbers
import os
import platform
import re
import warnings
from collections.abc import Iterator, Mapping
from importlib import metadata

import torch

#: Names the training device outright (``cpu``, ``cuda``, ``cuda:1``), over the automatic choice.
DEVICE_VARIABLE = "VITBN_DEVICE"
_ON_PURPOSE = f"set {DEVICE_VARIABLE}=cpu to train on the CPU on purpose"
#: The determinism claim every GPU record makes (CPU runs repeat exactly on any machine with the same software).
DETERMINISM = (
    "deterministic algorithms on (cuDNN deterministic, no autotuning, no TF32); a run repeats bit for bit on "
    "the same GPU model and software, unless its epochs list a kernel torch called nondeterministic"
)


class DeviceError(RuntimeError):
    """The device asked for (or the GPU this machine has) cannot train; never replaced by the CPU silently."""


def _no_cuda() -> str:
    return "this torch build has no CUDA" if torch.version.cuda is None else "torch.cuda.is_available() is False"


@functools.cache
def _check_cuda(index: int | None) -> None:
    """Start CUDA on the device once, with the deterministic settings, or say why it cannot start."""
    if not torch.cuda.is_available():
        why = _no_cuda() + ("" if torch.version.cuda is None else " (driver missing, too old, or no visible device)")
        raise DeviceError(f"CUDA cannot be used: {why}; fix: {_ON_PURPOSE}")
    use_determinism()
    try:
        torch.zeros(1, device=torch.device("cuda", index)).add_(1).cpu()
    except Exception as error:
        raise DeviceError(
            f"CUDA is present but unusable ({type(error).__name__}: {error}); fix: {_ON_PURPOSE}"
        ) from None


def _gpu_present() -> str | None:
    """Why this machine looks as if it has an NVIDIA GPU (a driver file), else None."""
    return next(filter(os.path.exists, ("/proc/driver/nvidia/version", "/dev/nvidia0")), None)


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device asked for, else ``$VITBN_DEVICE``, else CUDA, else the CPU. A GPU asked for, or present (a driver
    file), but unusable raises :class:`DeviceError` rather than training on the CPU for hours."""
    requested = device if device is not None else (os.environ.get(DEVICE_VARIABLE) or None)
    if requested is None:
        if not torch.cuda.is_available() and (marker := _gpu_present()):
            raise DeviceError(
                f"this machine has an NVIDIA GPU ({marker} exists) but torch cannot use it ({_no_cuda()}); "
                f"fix: repair the driver or the torch install, or {_ON_PURPOSE}"
            )
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        chosen = torch.device(requested)
    except (RuntimeError, TypeError) as error:
        raise DeviceError(f"device={requested!r} is not a device ({error}); use 'cpu', 'cuda' or 'cuda:N'") from None
    if chosen.type == "cuda":
        _check_cuda(chosen.index)
    elif chosen.type != "cpu":
        raise DeviceError(f"device={requested!r} is not supported; the book trains on 'cpu' or 'cuda'")
    return chosen


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a clock read afterwards measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _read(path: str) -> str:
    """A ``/proc`` file's text, '' where it cannot be read (off Linux, or a process that has ended)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


@functools.cache
def cpu_name() -> str:
    names = (
        line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines() if line.startswith("model name")
    )
    return next(names, None) or platform.processor() or platform.machine()


@functools.cache
def host() -> str | None:
    """This running machine (its boot, hashed to 12 hex digits), None where the kernel does not say. Machines sold
    under one CPU name differ in speed (hosts that all call themselves ``AMD EPYC`` have trained one configuration at
    clearly different speeds), so a comparison of times needs one host, not only one name (:func:`host_label`)."""
    boot = _read("/proc/sys/kernel/random/boot_id").strip()
    return hashlib.sha256(boot.encode()).hexdigest()[:12] if boot else None


def hardware(device: torch.device | None = None) -> dict:
    device = pick_device(device)
    info = {
        "device": device.type,
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if (this_host := host()) is not None:
        info["host"] = this_host
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            compute_capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            driver=_nvidia_driver(),
            determinism=DETERMINISM,
        )
    return info


@functools.cache
def _nvidia_driver() -> str | None:
    first = _read("/proc/driver/nvidia/version").partition("\n")[0]
    return next((w for w in first.split() if w[:1].isdigit() and "." in w), first.strip() or None)


def label(info: dict) -> str:
    """A ``hardware()`` dict in one line: ``'NVIDIA H100 80GB HBM3'`` or ``'CPU: AMD EPYC (2 cores)'``; a record's text
    reaches terminals and pages, so control characters (an ANSI escape) are dropped."""
    text = info["gpu"] if "gpu" in info else f"CPU: {info['cpu']} ({info['cpu_cores']} cores)"
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "", str(text))


#: A recorded host as :func:`host` writes it; any other text (a record from elsewhere) names no host.
_HOST = re.compile(r"[0-9a-f]{12}")


def host_label(info: dict) -> str:
    """:func:`label` and, where the record names one, the host: what a comparison of times pairs on. A record from
    before hosts were recorded has the label alone, so its epochs pair only with others of unrecorded host."""
    named = str(info.get("host") or "")
    return f"{label(info)} on host {named}" if _HOST.fullmatch(named) else label(info)


def hardware_label(device: torch.device | None = None) -> str:
    return label(hardware(device))


@functools.cache
def versions() -> dict:
    found = {"python": platform.python_version()}
    for name in ["torch", "torchvision", "einops", "numpy", "pandas", "ax-platform", "botorch"]:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def machine_load() -> dict:
    """How busy the machine is (1-minute load, other processes running now; None off Linux), for each epoch's record."""
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    busy = None
    if os.path.isdir("/proc"):  # a process's state follows its name's closing parenthesis in its stat
        others = (e for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid())
        busy = sum(_read(f"/proc/{e}/stat").rpartition(")")[2].split()[:1] == ["R"] for e in others)
    return {"load_1min": load, "busy_processes": busy, "cpu_cores": os.cpu_count()}


def cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds every process of this machine has used since boot, this process's own); None off Linux."""
    ticks = [int(v) for v in _read("/proc/stat").partition("\n")[0].split()[1:9]]  # user nice system idle iowait ...
    if len(ticks) < 8:
        return None
    busy = sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait; guest time is counted in user
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system


class OtherWork:
    """The CPU seconds the machine's other processes use over a span (this process's own left out): the direct
    measure of work beside a timed epoch, which a load average, lagging by a minute, misses when it is short."""

    def __init__(self):
        self.start = cpu_seconds()

    def seconds(self) -> float | None:
        end = cpu_seconds()
        if self.start is None or end is None:
            return None
        return round(max(0.0, (end[0] - self.start[0]) - (end[1] - self.start[1])), 2)


#: Other processes' CPU use that flags a timed span: a tenth of a core on average (daemons use a hundredth, other
#: work a core or more); never under five ticks of the 10-ms clock that counts it (a short test pass's grain).
OTHER_WORK_SHARE, OTHER_WORK_FLOOR = 0.1, 0.05


def contended(load_1min, cpu_cores, other_cpu_seconds=None, seconds=None, expected: int = 0) -> bool:
    """True when a span (an epoch) was timed beside other work: by the other processes' CPU seconds over it where
    recorded (:class:`OtherWork`), else by a 1-minute load above the cores by more than half a core (a run alone on
    every core keeps it near them; one other busy process adds a whole one). ``expected``: busy processes (a
    campaign's other workers, a core each) that do not count as other work."""
    if _known(other_cpu_seconds) and _known(seconds) and seconds > 0:
        return other_cpu_seconds > max((expected + OTHER_WORK_SHARE) * seconds, OTHER_WORK_FLOOR)
    return _known(load_1min) and _known(cpu_cores) and load_1min > cpu_cores + expected + 0.5


def contended_in(measured: Mapping, seconds: str = "train_seconds", expected: int = 0) -> bool:
    """:func:`contended` of a record's epoch, or of a stored measurement, read by its field names (``seconds``: the
    field holding the span's wall seconds)."""
    fields = ("load_1min", "cpu_cores", "other_cpu_seconds", seconds)
    return contended(*(measured.get(field) for field in fields), expected=expected)


def epoch_contended(epoch: Mapping, expected: int = 0) -> bool:
    """Whether a record's epoch was timed beside other work, in its training or (where recorded) its test pass: an
    epoch is one measurement, so work beside either part leaves all of its times out (``expected``: as
    :func:`contended`)."""
    test = contended(None, None, epoch.get("test_other_cpu_seconds"), epoch.get("test_seconds"), expected=expected)
    return contended_in(epoch, expected=expected) or test


def _known(value) -> bool:
    """A number, not None or NaN (a record without the field, read into a table)."""
    return isinstance(value, numbers.Real) and not math.isnan(value)


# -- determinism on a GPU -------------------------------------------------------------------------------------
#: Words of torch's non-determinism alerts: "... does not have a deterministic implementation, but you set
#: 'torch.use_deterministic_algorithms(True, warn_only=True)'" and "... defaults to a non-deterministic algorithm".
_ALERTS = ("deterministic implementation", "non-deterministic algorithm", "use_deterministic_algorithms")
#: Every alert this process has seen (first sentence), in order: torch warns some once per process.
_SEEN: dict[str, None] = {}
#: Re-emitted warnings, so each shows once per place (as Python's default filter would have shown it).
_SHOWN: dict = {}


def use_determinism() -> None:
    """Deterministic kernels and settings on CUDA. An op without a deterministic kernel warns rather than stopping a
    run hours in (:func:`watch_determinism` records it); no NaN fill: the book never reads memory it has not written."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False


@contextlib.contextmanager
def watch_determinism() -> Iterator[None]:
    """Note torch's non-determinism alerts raised in the block; every warning still shows (once a place) at the end."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        text = str(warning.message)
        if any(words in text for words in _ALERTS):
            _SEEN.setdefault(text.split(". ")[0][:200])
        warnings.warn_explicit(
            warning.message, warning.category, warning.filename, warning.lineno, registry=_SHOWN, source=warning.source
        )


def nondeterminism_recorded() -> dict:
    """What an epoch records: ``{"nondeterministic": [alerts]}`` once this process has seen one, else nothing."""
    return {"nondeterministic": list(_SEEN)} if _SEEN else {}
