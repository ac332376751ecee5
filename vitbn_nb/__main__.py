"""Command line: ``python -m vitbn_nb data | book``."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitbn_nb", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("data", help="prepare MNIST (exact offline copy if need be) and the transfer set")
    book = commands.add_parser("book", help="execute every chapter with papermill and build the HTML book")
    book.add_argument("--profile", default="auto", help="smoke | cpu | paper | auto (paper on a GPU, else cpu)")
    args = parser.parse_args(argv)

    if args.command == "data":
        from .data import prepare

        prepare()
    elif args.command == "book":
        from .book import build_book

        build_book(profile=args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
