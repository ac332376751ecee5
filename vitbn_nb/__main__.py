"""Command line: ``python -m vitbn_nb data | book | bench``."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitbn_nb", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("data", help="prepare MNIST (exact offline copy if need be) and the transfer set")
    book = commands.add_parser("book", help="execute every chapter with papermill and build the HTML book")
    book.add_argument("--profile", default="auto", help="smoke | cpu | paper | auto (paper on a GPU, else cpu)")
    book.add_argument("--chapters", nargs="+", metavar="NN", help="run only these chapters (numbers or names)")
    book.add_argument("--force", action="store_true", help="retrain every run instead of reusing finished ones")
    book.add_argument("--no-html", dest="html", action="store_false", help="execute the chapters only")
    book.add_argument("--output", metavar="DIR", help="build folder (default: build/)")
    book.add_argument("--notebooks", metavar="DIR", help="chapters folder (default: notebooks/)")
    book.add_argument("--figures", metavar="DIR", help="where the figures of a complete run go (default: figures/)")
    book.add_argument("--runs", metavar="DIR", help="run store (default: runs/ or $VITBN_RUNS_DIR)")
    book.add_argument("--mlflow", metavar="URI", help="mirror every run to this MLflow tracking URI "
                                                      "(e.g. sqlite:///mlflow.db; default: $MLFLOW_TRACKING_URI)")
    bench = commands.add_parser("bench", help="time training and inference: the book's engine against the seeds' "
                                              "pipeline, equal depths, BatchNorm folding (prints a table, writes JSON)")
    bench.add_argument("--quick", action="store_true", help="tiny sizes: every code path in seconds (tests, smoke)")
    bench.add_argument("--device", default=None, help="cpu | cuda (default: CUDA when present)")
    bench.add_argument("--out", default=None, metavar="DIR", help="folder for bench-<date>.json (default: build/bench)")
    bench.add_argument("--no-figures-copy", dest="copy", action="store_false", help="do not write figures/bench.json")
    bench.add_argument("--compile", action="store_true", help="also time torch.compile (minutes on a CPU)")
    args = parser.parse_args(argv)

    if args.command == "data":
        from .data import prepare

        prepare()
    elif args.command == "book":
        from .book import BookError, build_book

        try:
            build_book(profile=args.profile, notebooks_dir=args.notebooks, output_dir=args.output,
                       figures_dir=args.figures, runs_dir=args.runs, chapters=args.chapters, html=args.html,
                       force=args.force, mlflow=args.mlflow)
        except (BookError, ValueError) as error:
            print(f"\nbook: {error}", file=sys.stderr)
            return 1
    elif args.command == "bench":
        from .bench import run

        return run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
