"""What machine and which libraries produced a result: recorded with every run and figure."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from importlib import metadata

import torch


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The requested device, else CUDA when present, else the CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a clock read afterwards measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@functools.cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device: torch.device | None = None) -> dict:
    device = pick_device(device)
    info = {
        "device": device.type,
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def hardware_label(device: torch.device | None = None) -> str:
    """One line for captions: ``'NVIDIA H100 80GB HBM3'`` or ``'CPU: AMD EPYC (2 cores)'``."""
    info = hardware(device)
    return info["gpu"] if "gpu" in info else f"CPU: {info['cpu']} ({info['cpu_cores']} cores)"


@functools.cache
def versions() -> dict:
    names = ["torch", "torchvision", "einops", "numpy", "pandas", "ax-platform", "botorch"]
    found = {"python": platform.python_version()}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def machine_load() -> dict:
    """How busy the machine is now: the 1-minute load average and the other processes running this instant.

    Recorded beside every epoch's timings, so a time measured while another job ran can be flagged
    (on Linux; elsewhere the fields are None).
    """
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    busy = None
    proc = "/proc"
    if os.path.isdir(proc):
        busy, me = 0, os.getpid()
        for entry in os.listdir(proc):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"{proc}/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            busy += state == "R"
    return {"load_1min": load, "busy_processes": busy, "cpu_cores": os.cpu_count()}


def contended(load_1min, cpu_cores) -> bool:
    """True when more threads wanted to run than the machine has cores, by more than one on average."""
    return load_1min is not None and cpu_cores is not None and load_1min > cpu_cores + 1
