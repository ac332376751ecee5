"""``python -m vitbn_nb bench``: measure with chapter 08's settings, print the report, write the JSON (the command
lives beside the chapter whose settings it reads, so that the bench itself imports no chapter)."""

from __future__ import annotations

import argparse
import sys

from ... import chapters
from ...system import pick_device
from .settings import SpeedSettings


def run(args: argparse.Namespace) -> int:
    from ...bench import calibration, measurements, printout  # heavy: the command line's parser loads no bench

    try:
        device = pick_device(args.device)  # a GPU asked for but unusable is a DeviceError that says why
        settings = chapters.settings(SpeedSettings.chapter, "smoke" if args.quick else args.profile)
    except (RuntimeError, ValueError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    result = measurements.measure(settings, device)
    print()
    print(printout.format_report(result))
    for path in printout.write(result, args.out, copy_to_figures=args.copy):
        print(f"wrote {path}")
    if args.calibration:
        print()
        text = calibration.describe(calibration.calibrate(device))
        print(text)
        print(f"wrote {printout.write_text(text, args.out)}")
    return 0
