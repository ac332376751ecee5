"""``python -m vitbn_nb bench``: measure with chapter 08's settings, print the report, write the JSON (the command
lives beside the chapter whose settings it reads, so that the bench itself imports no chapter)."""

from __future__ import annotations

import argparse
import sys

from ... import chapters
from ...system import pick_device
from .settings import SpeedSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile", default="auto", help="chapter 08's settings: smoke | cpu | paper | auto (paper on a GPU, else cpu)"
    )
    parser.add_argument("--quick", action="store_true", help="the smoke profile: every code path in seconds")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: CUDA when present)")
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="folder for bench-<date>.json (default: build/bench)"
    )
    parser.add_argument("--no-figures-copy", dest="copy", action="store_false", help="do not write figures/bench.json")
    parser.add_argument(
        "--no-calibration", dest="calibration", action="store_false", help="skip train --dry-run's calibration"
    )


def run(args: argparse.Namespace) -> int:
    from ...bench import calibration, measurements, report  # heavy: the command line's parser loads no bench

    try:
        device = pick_device(args.device)  # a GPU asked for but unusable is a DeviceError that says why
        settings = chapters.settings(SpeedSettings.chapter, "smoke" if args.quick else args.profile)
    except (RuntimeError, ValueError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    result = measurements.measure(settings, device)
    print()
    print(report.format_report(result))
    for path in report.write(result, args.out, copy_to_figures=args.copy):
        print(f"wrote {path}")
    if args.calibration:
        print()
        text = calibration.describe(calibration.calibrate(device))
        print(text)
        print(f"wrote {report.write_text(text, args.out)}")
    return 0
