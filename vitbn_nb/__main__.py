"""``python -m vitbn_nb <command>``: a failure is one line with its fix, exit status 1 (``--debug``: the traceback)."""

from __future__ import annotations

import argparse
import os
import sys


def _shared_arguments(command) -> None:
    """``book`` and ``train``: the profile, the chapters, settings by name, ``--force`` and ``--from-scratch``."""
    command.add_argument("--profile", default="auto", help="smoke | cpu | paper | auto (paper on a GPU, else cpu)")
    command.add_argument("--chapters", nargs="+", metavar="NN", help="only these chapters (numbers or names)")
    command.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a chapter setting (repeatable; each chapter that has it takes it), as papermill's -p NAME VALUE, "
        "e.g. --set epochs=3 --set fig8_depths=[4,6]; a book whose settings differ from the protocol writes its "
        "outputs to a folder of its own under build/, never figures/",
    )
    command.add_argument("--force", action="store_true", help="retrain every run instead of reusing finished ones")
    command.add_argument(
        "--from-scratch",
        action="store_true",
        help="ignore the records committed in figures/records/: train every run the run store lacks (a reproduction)",
    )


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench``'s options (run by :func:`vitbn_nb.chapters.speed.command.run`)."""
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


def _readme_arguments(parser: argparse.ArgumentParser) -> None:
    """``readme``'s options (run by :func:`vitbn_nb.publishing.readme.run`)."""
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when README.md or the book's pages disagree with figures/"
    )
    parser.add_argument("--figures", default=None, metavar="DIR", help="the outputs to read (default: figures/)")
    parser.add_argument(
        "--measure-setup", action="store_true", help="first measure this environment's cost into figures/setup.json"
    )


def rendering(chapter: str, profile: str) -> tuple[str, tuple[float, ...]]:
    """For ``book``: the profile ``chapter`` renders at in a ``profile`` book, and the lrs of its ``paper`` runs."""
    from . import chapters

    at = chapters.evidence_profile(chapter, profile)
    return at, chapters.full_protocol_lrs(chapter, at)


def _given(args) -> dict:
    """``--set NAME=VALUE`` as settings by name (a name given twice: the last wins, as papermill's ``-p``)."""
    from .profiles import parse_assignment  # light enough, but torch: --help and --version import nothing heavy

    return dict(parse_assignment(text) for text in args.set)


def check_given(selected: list[str], given: dict) -> None:
    """For ``book``: refuse, before any kernel starts, a setting no selected chapter has or a value it refuses."""
    # the registry and the train command load torch: --help and --version import nothing heavy
    from . import chapters
    from .train import check_given as check

    check(chapters.names(selected), given)


def check_device_first(rendered_at: dict[str, str], profile: str, runs, force: bool) -> None:
    """Before ``book``'s kernels train: a GPU or a stacked run trains only after the device's check, stored once."""
    from . import chapters
    from .engines import check_device
    from .train import needs_device_check, planned_runs, untrained

    log = lambda line: print(line, flush=True)
    known = [chapter for chapter, at in rendered_at.items() if chapter in chapters.CHAPTERS and at == profile]
    to_train = [run for chapter in known for run in untrained(profile, [chapter])]
    planned = [config for chapter in known for config in planned_runs(chapter, profile)]
    may_train = force or to_train or len(known) < len(rendered_at)  # a chapter the runner cannot plan may train
    if to_train:
        log(f"  {len(to_train)} run(s) or optimisation(s) to train, e.g. {to_train[0]}")
    elif not may_train:
        log("  nothing to train: every run is in the run store or the committed records")
    if may_train and needs_device_check(planned):
        check_device.ensure(quick=profile == "smoke", store=runs, log=log)


def main(argv=None) -> int:
    """Run one command; a refusal it names (a bad setting, a damaged store, a failed chapter, an unusable device for
    ``check-device``) is one line on stderr and exit status 1."""
    from . import __version__
    from .paths import COMMITTED_VARIABLE  # light: --help and --version import nothing heavy

    parser = argparse.ArgumentParser(
        prog="python -m vitbn_nb",
        description="The reproduction book's commands. A failure prints one message naming the file or setting and "
        "the fix (exit status 1); --debug anywhere on the line shows the traceback instead.",
    )
    parser.add_argument("--version", action="version", version=f"vitbn_nb {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("data", help="prepare MNIST (exact offline copy if need be) and the transfer set")
    book = commands.add_parser("book", help="execute every chapter with papermill and build the HTML book")
    _shared_arguments(book)
    book.add_argument(
        "--no-train",
        dest="train",
        action="store_false",
        help="render from the run store only: a missing run fails its chapter, naming the run",
    )
    book.add_argument(
        "--measure",
        action="store_true",
        help="chapter 08 times anew on this machine (minutes to tens of minutes) instead of showing the committed "
        "measurement, figures/bench.json; a complete cpu or paper book then publishes the new one",
    )
    book.add_argument("--no-html", dest="html", action="store_false", help="execute the chapters only")
    for name, what in (
        ("output", "build folder (default: build/)"),
        ("notebooks", "chapters folder (default: notebooks/)"),
        ("figures", "where the figures of a complete run go (default: figures/)"),
        ("runs", "run store (default: runs/ or $VITBN_RUNS_DIR)"),
    ):
        book.add_argument(f"--{name}", metavar="DIR", help=what)
    book.add_argument(
        "--replace-larger",
        action="store_true",
        help="let a smaller profile replace the figures of a larger one (e.g. cpu over paper)",
    )
    book.add_argument(
        "--mlflow",
        metavar="URI",
        help="mirror every run to this MLflow tracking URI (e.g. sqlite:///mlflow.db; default: $MLFLOW_TRACKING_URI)",
    )
    _bench_arguments(
        commands.add_parser(
            "bench",
            help="time training and inference: the book's engine against article 1's "
            "pipeline, equal depths, BatchNorm folding (prints a table, writes JSON)",
        )
    )
    train = commands.add_parser(
        "train", help="train every chapter's runs without rendering (then: make book TRAIN=never)"
    )
    _shared_arguments(train)
    train.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="stop at the last epoch boundary before this many seconds"
    )
    train.add_argument(
        "--dry-run", action="store_true", help="list each chapter's runs and training steps; train nothing"
    )
    campaign = commands.add_parser(
        "campaign", help="continue the paper profile's training campaign over sessions (see vitbn_nb.campaign)"
    )
    campaign.add_argument(
        "action",
        nargs="?",
        default="train",
        choices=("train", "commit", "measure", "throughput"),
        help="train (the default): continue the campaign; commit: copy finished records into figures/records/; "
        "measure: take the timed stage's measurements; throughput: time one 2-thread worker against two 1-thread "
        "workers side by side (a quiet machine, minutes)",
    )
    campaign.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="train the untimed stages with N processes of one thread each (they share the store's run locks; a "
        "timed stage always trains with one)",
    )
    campaign.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    campaign.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="start only runs estimated to finish within this many seconds"
    )
    campaign.add_argument("--dry-run", action="store_true", help="what is done, what is left and its estimate")
    campaign.add_argument(
        "--quiet", action="store_true", help="also train the stages whose epoch times are shown (nothing else running)"
    )
    campaign.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for training (torch.set_num_threads); on a machine busy with other work, 1 keeps the "
        "campaign from fighting it for cores",
    )
    campaign.add_argument("--retake", action="store_true", help="measure: take every finished run's measurement anew")
    campaign.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="RUNID",
        help="commit: replace this run's committed record with the store's, which differs from it",
    )
    check = commands.add_parser(
        "check-device", help="check that this device trains the book's engines right (minutes); keep the verdict"
    )
    check.add_argument("--quick", action="store_true", help="tiny settings: every check in seconds (a smoke test)")
    check.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: the device training picks)")
    store = commands.add_parser("runs", help="the run store: check it, retrain one run, export or import a bundle")
    store_commands = store.add_subparsers(dest="runs_command", required=True)
    store_commands.add_parser("check", help="verify every record and weight file; list damaged runs and the fix")
    export = store_commands.add_parser(
        "export", help="write a bundle (records, optimisation state, unfinished checkpoints, needed weights)"
    )
    export.add_argument("file")
    export.add_argument("--profile", default="auto", help="the profile whose rendering the weights serve")
    export.add_argument("--weights", default="needed", choices=("needed", "all"), help="which finished runs' weights")
    store_commands.add_parser("import", help="add a bundle's runs to the run store, verified").add_argument("file")
    retrain = store_commands.add_parser("retrain", help="train one run anew from its recorded configuration")
    retrain.add_argument("run_id")
    verify = store_commands.add_parser(
        "verify",
        help="replay imported runs (their first epoch from the seed, their weights tested): trusted if they do",
    )
    verify.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="default: every imported run not yet verified")
    commands.add_parser(
        "plans",
        help="stamp: read from git when each seed plan was committed (figures/plan_commits.json); check: compare",
    ).add_argument("plans_command", choices=("stamp", "check"))
    commands.add_parser(
        "colab-cell", help="rewrite every chapter's Colab install cell from [tool.vitbn-book] in pyproject.toml"
    )
    _readme_arguments(
        commands.add_parser(
            "readme", help="rewrite the README's findings and the book's claims and reference pages from figures/"
        )
    )
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named first: `--foo` alone is a misspelt option, not a missing command
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error(f"choose a command: {', '.join(commands.choices)} (--help says what each does)")
    from .store.records import RunStoreError

    if getattr(args, "from_scratch", False):  # where the committed records live: nowhere (the kernels inherit it)
        os.environ[COMMITTED_VARIABLE] = "ignore"
    refused: tuple[type[Exception], ...] = (ValueError, RunStoreError)
    if args.command == "book":
        from .publishing.book_chapters import BookError

        refused += (BookError,)
    elif args.command == "check-device":  # elsewhere a DeviceError reaches cli(), which shows it or its traceback
        from .system import DeviceError

        refused += (DeviceError,)
    try:
        return _run(args)
    except refused as error:
        name = f"runs {args.runs_command}" if args.command == "runs" else args.command
        print(f"{name}: {error}", file=sys.stderr)
        return 1


def _run(args) -> int:
    if args.command == "data":
        from .data import prepare

        prepare()
    elif args.command == "book":
        from .publishing.book import build_book

        folders = {f"{name}_dir": getattr(args, name) for name in ("notebooks", "output", "figures", "runs")}
        flags = {name: getattr(args, name) for name in ("chapters", "html", "force", "mlflow", "replace_larger")}
        hooks = {"rendering": rendering, "before_training": check_device_first, "check_given": check_given}
        given = _given(args)
        build_book(args.profile, **folders, **flags, train=args.train, measure=args.measure, given=given, **hooks)
    elif args.command == "bench":
        from .chapters.speed.command import run as bench_run

        return bench_run(args)
    elif args.command == "train" and args.dry_run:
        if args.set:
            raise ValueError("--dry-run prices the profile's protocol; give --set without it")
        return _train_dry_run(args)
    elif args.command == "train":
        from . import train as training
        from .limits import Deadline, DeadlineReached
        from .paths import runs_dir

        deadline = None if args.deadline is None else Deadline.after(args.deadline)
        try:
            done = training.train(args.profile, args.chapters, force=args.force, deadline=deadline, given=_given(args))
        except DeadlineReached as stopped:
            if not deadline.epochs_trained:  # running it again would stop at the same place
                raise ValueError(
                    f"the deadline of {args.deadline:g} s left no room for one epoch ({stopped.run_id}); "
                    "nothing was trained; fix: give a longer --deadline"
                ) from None
            print(f"train: {stopped}", file=sys.stderr)
            return 75  # EX_TEMPFAIL: nothing is lost; the same command goes on from here
        print(f"train: {len(done)} run(s) finished and stored in {runs_dir()}")
    elif args.command == "campaign":
        return _campaign(args)
    elif args.command == "plans":
        from .publishing import plan_stamps

        try:
            if args.plans_command == "stamp":
                for name, stamp in plan_stamps.stamp().items():
                    print(f"plan {name}: committed {stamp['committed']} ({stamp['commit'][:10]})")
                return 0
            problems = plan_stamps.check()
        except plan_stamps.StampError as error:
            raise ValueError(str(error)) from None
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"plans: {'the stamps agree with git' if not problems else f'{len(problems)} stamp(s) disagree'}")
        return 1 if problems else 0
    elif args.command == "check-device":
        from .engines import check_device

        if not check_device.run(args.device, check_device.QUICK if args.quick else check_device.FULL)["passed"]:
            print(check_device.FAILED_HELP, file=sys.stderr)
            return 1
    elif args.command == "runs":
        from . import train as training
        from .store import bundle, damage, provenance, records, run_folder, runs

        if args.runs_command in ("check", "export"):  # a retrain a kill interrupted is completed first, and said
            for recovered in run_folder.recover_swaps():
                print(f"recovered {recovered}")
        if args.runs_command == "check":
            damaged = damage.check_store()
            notes = "".join(f"\nnote: {note}" for note in damage.store_notes())
            if waiting := provenance.waiting(runs.runs_dir()):
                notes += (
                    f"\nnote: {len(waiting)} run(s) imported from a bundle are not replayed yet "
                    f"({', '.join(waiting[:3])}"
                    f"{' ...' if len(waiting) > 3 else ''}): `python -m vitbn_nb runs verify` replays them; "
                    "`campaign commit` commits none until then"
                )
            if damaged.empty:
                print(f"run store {runs.runs_dir()}: every record and weight file is intact{notes}")
                return 0
            state = damaged["run"] == records.STATE_FOLDER
            print(
                f"run store {runs.runs_dir()}: {damaged.loc[~state, 'run'].nunique()} damaged run(s)"
                + (f", {state.sum()} damaged optimisation file(s)" if state.any() else "")
            )
            for row in damaged.itertuples():
                print(f"- {row.run} ({row.folder}): {row.problem}\n  {row.fix}")
            print(notes.lstrip("\n"))
            return 1
        if args.runs_command == "export":
            needed = None if args.weights == "all" else training.needed_weights(args.profile)
            done = bundle.export(args.file, needed=needed, profile=args.profile)
            print(
                f"runs export: {done['runs']} run(s), {done['weights']} weight file(s), {done['checkpoints']} "
                f"unfinished checkpoint(s): {done['bytes'] / 2**20:.1f} MiB in {args.file}"
            )
        elif args.runs_command == "import":
            done = bundle.import_bundle(args.file)
            print(
                f"runs import: {done['added']} added, {done['updated']} updated, {done['unchanged']} "
                f"already there, {done['state files']} optimisation file(s) into {runs.runs_dir()}"
            )
        elif args.runs_command == "verify":
            from .engines import replay

            table = replay.verify(args.run_ids or None)
            if table.empty:
                print(f"runs verify: no run of {runs.runs_dir()} waits for a replay (every imported run is verified)")
                return 0
            for row in table.itertuples():
                verdict = "verified" if row.passed else f"REFUSED: {row.why}"
                print(f"- {row.run} (was {row.before}; {row.compared}): {verdict}")
            refused = int((~table["passed"]).sum())
            print(
                f"runs verify: {len(table) - refused} verified, {refused} refused "
                f"(kept in each run's {provenance.FILE})"
            )
            return 1 if refused else 0
        else:
            training.retrain(args.run_id)
    elif args.command == "colab-cell":
        from .publishing.colab import main as colab_main

        return colab_main()
    elif args.command == "readme":
        from .publishing import readme

        return readme.run(args)
    return 0


def _train_dry_run(args) -> int:
    from . import campaign, chapters, profiles
    from . import train as training
    from .bench.calibration import describe
    from .system import hardware_label

    profile, selected = profiles.resolve(args.profile), chapters.names(args.chapters)  # typos first
    print("pricing the runs left: a short calibration, or the one kept from a quiet machine ...")
    estimator = campaign.estimator(training.priced_configs(profile, selected))
    table = training.plan_table(profile, selected, price=estimator.seconds_left)
    print(
        f"profile {profile}: what `train` would run (nothing is trained); estimated on {hardware_label()} "
        "as `campaign --dry-run` estimates: a run's own epochs, else its other seeds', else the "
        "calibration corrected by the epochs this store's runs took here (estimates for planning)"
    )
    print(table.to_string(index=False))
    print(
        f"total: {table['runs'].sum()} runs, {table['trials'].sum()} trials, "
        f"{table['finished'].sum()} finished, ~{table['estimated hours left'].sum():.1f} h left"
    )
    if profile == campaign.PROFILE:
        stages = campaign.status(estimator)
        print(
            f"of which the campaign's stages (`campaign --dry-run`, the same estimate): "
            f"{stages['runs'].sum() - stages['finished'].sum()} runs, "
            f"~{stages['estimated hours left'].sum():.1f} h left"
        )
    if estimator.calibration is not None:
        kept = estimator.calibration.attrs.get("kept")
        print(f"calibration {'kept from' if kept else 'taken'} {estimator.calibration.attrs.get('taken')}")
        print(describe(estimator.calibration))
    if why := estimator.busy():
        print(f"note: {why}; calibrate again on a quiet machine for a plan")
    return 0


def _campaign(args) -> int:
    import torch

    from . import campaign
    from .limits import Deadline, DeadlineReached
    from .paths import runs_dir
    from .system import hardware_label, pick_device

    if args.action == "commit":
        campaign.commit(replace=set(args.replace))
        return 0
    cores = os.cpu_count() or 1
    for name in ("threads", "workers"):  # more would fail inside torch, as a bug
        if (value := getattr(args, name)) is not None and not 1 <= value <= cores:
            raise ValueError(f"--{name} {value} is not allowed; give 1 to {cores} (this machine's cores)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.action == "measure":
        campaign.measure(retake=args.retake)
        return 0
    if args.action == "throughput":
        from .bench import throughput

        print(throughput.report(throughput.measure()))
        return 0
    if args.dry_run:
        print("calibrating the runs left (a few training steps of each model) ...")
        device = pick_device(None)
        work = [c for stage in campaign.STAGES for c in stage.configs() + stage.placeholders(device)]
        estimator = campaign.estimator(work)
        print(f"the campaign ({campaign.PROFILE} profile), store {runs_dir()}, estimated on {hardware_label()}:")
        print(campaign.status(estimator).to_string(index=False))
        if why := estimator.busy():
            print(f"note: {why}")
        return 0
    deadline = None if args.deadline is None else Deadline.after(args.deadline)
    try:
        if args.workers > 1 and args.worker == 0:
            torch.set_num_threads(1)
            done = campaign.train_workers(args, deadline)
        else:
            done = campaign.train(deadline, quiet=args.quiet, worker=args.worker, workers=args.workers)
    except (DeadlineReached, campaign.Unfinished) as stopped:
        print(f"campaign: {stopped}; `campaign commit` copies the finished runs' records", file=sys.stderr)
        return 75
    print(f"campaign: done; {len(done)} run(s) trained or read in {runs_dir()}")
    return 0


def describe(error: BaseException) -> str:
    """One line for a failure: the book's own errors say what and how to fix; anything else is named as a bug."""
    if isinstance(error, ModuleNotFoundError) and error.name and not error.name.startswith("vitbn_nb"):
        # answered before the imports below, which may need the very module that is missing
        return (
            f"the Python package that provides '{error.name}' is not installed for {sys.executable}; fix: install "
            "the book's dependencies (`make` does, or `pip install -e .` in this folder) and run the same command again"
        )
    from .store.records import RunStoreError
    from .system import DeviceError

    if isinstance(error, (ValueError, RunStoreError, DeviceError, OSError)):
        text = str(error)
        if isinstance(error, OSError) and getattr(error, "errno", None) == 28 and "fix:" not in text:
            text += "; fix: free some disk space and run the same command again (nothing finished was lost)"
        return text
    return (
        f"{type(error).__name__}: {error}; this is a bug in the book: please report it with the traceback "
        "(--debug shows it)"
    )


def cli(argv=None) -> int:
    """``main`` with Ctrl-C turned into one line that says how to go on, and every error into one message."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        return main(argv)
    except KeyboardInterrupt:
        print(
            "\ninterrupted: every finished epoch is stored; run the same command again to resume where it stopped",
            file=sys.stderr,
        )
        return 130
    except Exception as error:
        if debug:
            raise
        command = next((a for a in argv if not a.startswith("-")), "")
        print(f"python -m vitbn_nb {command}: {describe(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli())
