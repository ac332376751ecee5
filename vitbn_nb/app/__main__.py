"""``python -m vitbn_nb.app [--host H] [--port P] [--run RUN_ID] [--no-train]``: serve the digit-drawing page."""

from __future__ import annotations

import argparse
import sys

from ..store.records import RunStoreError
from .server import serve


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitbn_nb.app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    parser.add_argument("--run", metavar="RUN_ID", help="serve this run instead of the best one in the store")
    parser.add_argument(
        "--no-train",
        dest="train",
        action="store_false",
        help="refuse to start when the store has no model, instead of training a small one",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:  # the socket layer would wrap 99999 to 16 bits and listen elsewhere
        print(f"{parser.prog}: --port {args.port}: a port is a number from 1 to 65535", file=sys.stderr)
        return 2
    try:
        serve(host=args.host, port=args.port, run_id=args.run, train_if_missing=args.train)
    except (ValueError, RunStoreError, OSError) as error:  # a store that is a file, read-only, damaged; a port taken
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
