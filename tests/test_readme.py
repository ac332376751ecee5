"""README.md's findings and the book's claims and reference pages are written from figures/, and a test fails when
they disagree."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from vitbn_nb.__main__ import main
from vitbn_nb.publishing import forest, readme

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "figures"


def test_readme_and_the_book_pages_agree_with_the_committed_figures():
    assert readme.update(FIGURES, ROOT, write=False) == [], (
        "the generated blocks differ from figures/: run `python -m vitbn_nb readme` and commit both"
    )


def test_the_readme_leads_with_each_articles_findings_on_its_first_screen():
    """Its first 60 lines: the generated finding sentences and the forest plot of every judged claim, in under 600
    words; the counts per article sit below them."""
    text = (ROOT / "README.md").read_text()
    first_screen = "\n".join(text.splitlines()[:60])
    for sentence in readme.lead_sentences(forest.saved_claims(FIGURES)):
        assert sentence in first_screen
    assert f"figures/{readme.LEAD_FIGURE}.png" in first_screen and readme.CLAIMS_PAGE in first_screen
    assert len(first_screen.split()) < 600, f"the README's first screen holds {len(first_screen.split())} words"
    assert "**Decided**" not in first_screen and "**Decided**" in text  # the counts: below the first screen


def _claims_csv(folder, rows):
    """A chapter's judged claims, as ``claims.table`` writes them."""
    from vitbn_nb import chapters
    from vitbn_nb.chapters.depth_study import article
    from vitbn_nb.judging import claims, verdicts

    found = [verdicts.difference(key, values, +1, condition=condition) for key, values, condition in rows]
    claims.table(found, article.findings(chapters.settings("05_depth_study", "paper"))).to_csv(
        folder / "05_claims.csv", index=False
    )


def test_the_results_table_lists_every_saved_claim_with_the_rules_verdict(tmp_path):
    copy = tmp_path / "figures"
    copy.mkdir()
    shutil.copyfile(FIGURES / "manifest.json", copy / "manifest.json")
    _claims_csv(
        copy,
        [
            ("article2/depth/lr0.003/d6", [2.0, 3.0, 2.5], ""),
            ("article2/depth/lr0.003/d7", [1.0], ""),
            ("article2/fig10/d3", [-1.0, 1.0, 0.2], "both at depth 3"),
        ],
    )
    results = readme.results_block(copy)
    table = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith("| claim |")]
    table = [line for line in table if "---" not in line]
    assert len(table) == 3 and results.count("| claim |") == 2  # one table per figure: Fig 8 and Fig 10
    assert "agrees" in table[0] and "+2.5 pt" in table[0]
    assert "shown, not judged" in table[1] and "(1 seed)" in table[1]
    assert "within noise" in table[2] and "(both at depth 3)" in table[2]
    assert "figures/manifest.json" in results and "the one rule" in results


def test_a_changed_claims_file_changes_the_readme(tmp_path):
    copy = tmp_path / "figures"
    shutil.copytree(FIGURES, copy)
    _claims_csv(copy, [("article2/depth/lr0.003/d6", [2.0, 3.0, 2.5], "")])
    text = readme.render((ROOT / "README.md").read_text(), copy)
    _claims_csv(copy, [("article2/depth/lr0.003/d6", [-2.0, -3.0, -2.5], "")])
    changed = readme.render(text, copy)
    assert changed != text and "disagrees" in changed


def test_the_performance_block_reports_ratios_and_ceilings_without_targets():
    block = readme.performance_block(FIGURES)
    assert "ceiling" in block and "target" not in block and "met" not in block.replace("measure", "")


def test_chapter_8_rendered_from_the_committed_measurement_is_said_to_show_it(tmp_path):
    import json

    manifest = json.loads((FIGURES / "manifest.json").read_text())
    timed = {"chapter": "08_where_the_speed_comes_from", "hardware": "CPU: X", "date": "2026-01-01"}
    manifest["outputs"] = {
        "new_equal_depth_timing": {
            **timed,
            "reads": "fresh models timed by vitbn_nb.bench, the measurement committed in figures/bench.json",
        },
        "new_op_counts": {**timed, "reads": "fresh models, operations counted as the chapter ran"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert readme._chapter8_measurement(tmp_path).startswith("Chapter 8 shows this same measurement")
    manifest["outputs"]["new_equal_depth_timing"]["reads"] = "fresh models timed by vitbn_nb.bench as the chapter ran"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert "takes its own measurement" in readme._chapter8_measurement(tmp_path)
    assert "CPU: X, 2026-01-01" in readme._chapter8_measurement(tmp_path)


def test_an_empty_figures_folder_says_so(tmp_path):
    assert "no manifest yet" in readme.results_block(tmp_path)
    assert "has not written" in readme.performance_block(tmp_path)


def test_a_readme_without_markers_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="lacks the findings markers"):
        readme.render("# a README\n", FIGURES)


def _documents_in(root):
    for document in readme.DOCUMENTS:
        (root / document).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / document, root / document)


def test_update_writes_only_when_something_changed(tmp_path):
    _documents_in(tmp_path)
    assert readme.update(FIGURES, tmp_path) == []
    stale = lambda blocks: "x\n" + "\n".join(f"{start}\nstale\n{end}" for start, end in map(readme._markers, blocks))
    (tmp_path / "book" / "claims.md").write_text(stale(readme.DOCUMENTS["book/claims.md"]))
    assert readme.update(FIGURES, tmp_path) == [tmp_path / "book" / "claims.md"]
    assert "stale" not in (tmp_path / "book" / "claims.md").read_text()


def test_a_document_without_its_markers_is_refused_and_nothing_written(tmp_path):
    _documents_in(tmp_path)
    (tmp_path / "book" / "reference.md").write_text("# no markers\n")
    (tmp_path / "README.md").write_text((tmp_path / "README.md").read_text().replace("rows", "ROWS"))
    before = (tmp_path / "README.md").read_text()
    with pytest.raises(ValueError, match="reference.md lacks the performance markers"):
        readme.update(FIGURES, tmp_path)
    assert (tmp_path / "README.md").read_text() == before


@pytest.fixture
def readme_copy(tmp_path, monkeypatch):
    """``python -m vitbn_nb readme`` pointed at a copy of the documents, so no test touches the real ones."""
    _documents_in(tmp_path)
    monkeypatch.setattr(readme, "project_root", lambda: tmp_path)
    return tmp_path / "README.md"


@pytest.mark.parametrize("check", [False, True], ids=["rewrite", "check"])
@pytest.mark.parametrize("made", [False, True], ids=["missing", "no-manifest"])
def test_a_figures_folder_without_a_manifest_is_refused_and_the_readme_left_alone(
    readme_copy, tmp_path, capsys, check, made
):
    figures = tmp_path / "nowhere"
    if made:
        shutil.copytree(FIGURES, figures)
        (figures / "manifest.json").unlink()
    before = readme_copy.read_text()
    assert main(["readme", *["--check"] * check, "--figures", str(figures)]) == 1
    said = capsys.readouterr()
    assert str(figures) in said.err and "manifest.json" in said.err and "run `python -m" not in said.out
    assert len(said.err.strip().splitlines()) == 1
    assert readme_copy.read_text() == before


@pytest.mark.parametrize(
    "manifest",
    ["[1, 2]", '{"outputs": 5}', '{"outputs": {"a": 3}}', '{"no outputs": {}}', "{not json"],
    ids=["list", "outputs-number", "output-number", "no-outputs", "not-json"],
)
def test_a_manifest_of_the_wrong_shape_is_refused_by_name(readme_copy, tmp_path, capsys, manifest):
    figures = tmp_path / "figures"
    shutil.copytree(FIGURES, figures)
    (figures / "manifest.json").write_text(manifest)
    before = readme_copy.read_text()
    for check in ([], ["--check"]):
        assert main(["readme", *check, "--figures", str(figures)]) == 1
        said = capsys.readouterr().err
        assert str(figures / "manifest.json") in said and len(said.strip().splitlines()) == 1
    assert readme_copy.read_text() == before
    with pytest.raises(ValueError, match="manifest.json"):
        readme.results_block(figures)


def test_the_transfer_row_names_its_depth_its_stand_in_set_and_its_single_seed(tmp_path):
    import pandas as pd

    from vitbn_nb import data
    from vitbn_nb.chapters.emnist_transfer import article, judge
    from vitbn_nb.judging.claims import table

    copy = tmp_path / "figures"
    copy.mkdir()
    shutil.copyfile(FIGURES / "manifest.json", copy / "manifest.json")
    measured = pd.DataFrame(
        [
            dict(model=m, seed=0, depth=6, transfer_set=data.FALLBACK_SOURCE, round_seconds=[t, t * 1.01, t * 0.99])
            for m, t in (("ViT", 1.0), ("ViTBNFFN", 0.8), ("ViTBN", 0.8))
        ]
    )
    table(judge.transfer(measured, "CPU: a test machine"), article.findings()).to_csv(
        copy / "06_claims.csv", index=False
    )
    block = readme.results_block(copy)
    assert "**article 1, on the series' transfer article**" in block
    rows = [line for line in block.splitlines() if "judged at equal depth only" in line]
    assert len(rows) == 2
    for row in rows:
        assert "judged at equal depth only" in row and "computed one block" in row
        assert "scikit-learn's 8x8 digits upsampled to 28x28" in row and "1 seed" in row


def test_a_chapters_takeaway_follows_its_verdicts(tmp_path):
    from vitbn_nb.publishing.results import takeaway_text

    copy = tmp_path / "figures"
    copy.mkdir()
    _claims_csv(copy, [("article2/depth/lr0.003/d6", [2.0, 3.0, 2.5], ""), ("article2/depth/lr0.003/d7", [1.0], "")])
    claims = pd.read_csv(copy / "05_claims.csv", keep_default_na=False)
    text = takeaway_text(claims, "paper")
    assert "**Decided**: 1" in text and "+2.5 pt" in text and "**agrees**" in text
    assert "**Waiting for their planned seeds**: 1" in text and "profile `paper`, 2 claims" in text
    _claims_csv(copy, [("article2/depth/lr0.003/d6", [-2.0, -3.0, -2.5], "")])
    flipped = takeaway_text(pd.read_csv(copy / "05_claims.csv", keep_default_na=False), "paper")
    assert "**disagrees**" in flipped and "agrees**" not in flipped.replace("disagrees**", "")


def test_a_gain_row_names_each_machine_once_when_seeds_were_timed_on_different_ones():
    import pandas as pd

    tail = " here; article 1: an NVIDIA L4 GPU"
    gains = pd.DataFrame(
        {
            "condition": ["as written: ViTBN d6 against ViT d6"] * 3,
            "outcome": ["disagrees"] * 3,
            "estimate": ["-1.0", "-2.0", "-3.0"],
            "says": ["training time per epoch sped up by at least 60 % (its r_t = 2.7)"] * 3,
            "scale": [f"CPU: A{tail}", f"CPU: B{tail}", f"CPU: A, CPU: B{tail}"],
            "claim": ["article1/lr0.0005/r_t/ViTBN"] * 3,
            "chapter": ["03_claims"] * 3,
        }
    )
    (row,) = readme._gain_rows(gains, {"03_claims": "paper"})
    assert row.endswith("| profile paper; timed on CPU: A, CPU: B |") and "3 gains" in row and "-3.0 % to -1.0 %" in row
    assert "(as written, fixed rates;" in row
    # the optimised runs' gains are their own row, however their configuration is worded
    optimised = gains.assign(claim="article1/optimised/r_t/ViTBN", chapter="04_claims")
    rows = readme._gain_rows(pd.concat([gains, optimised]), {"03_claims": "paper", "04_claims": "cpu"})
    assert len(rows) == 2 and "optimised settings" in rows[1] and "profile cpu" in rows[1]
    # the transfer set's inference gains too, their machine named without the scale's note
    transfer = gains.assign(
        claim="article1/transfer/ViTBN", chapter="06_claims", scale="CPU: A; the article gives no hardware or number"
    )
    rows = readme._gain_rows(pd.concat([gains, transfer]), {"03_claims": "paper", "06_claims": "cpu"})
    assert len(rows) == 2 and "transfer set's inference passes" in rows[1] and rows[1].endswith("timed on CPU: A |")
    assert "fixed rates" in rows[0] and "3 gains" in rows[0]


def test_no_page_repeats_a_paragraph_and_the_sources_are_linked():
    import collections

    for page in ("README.md", "book/reference.md", "book/claims.md"):
        text = (ROOT / page).read_text()
        paragraphs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 80]
        repeated = [p[:80] for p, n in collections.Counter(paragraphs).items() if n > 1]
        assert not repeated, f"{page} repeats: {repeated}"
    readme = (ROOT / "README.md").read_text()
    for target in ("towardsdatascience.com", "github.com/anindyahepth/BatchNorm_in_Transformers_CV", "CITATION.cff"):
        assert target in readme


def test_the_findings_lead_with_two_sentences_whose_headlines_follow_the_verdicts():
    claims = forest.saved_claims(ROOT / "figures")
    first, second = readme.lead_sentences(claims)
    assert "as article 1 ran them" in first and "all three models of six blocks" in first
    assert second.startswith("**Article 2's conclusion") and "lr 0.003, depth 6, 7" in second
    ratios = (claims["kind"] == "ratio") & claims["condition"].str.startswith("as written")
    if (claims.loc[ratios, "outcome"] != "agrees").all() and len(claims[ratios]):
        assert first.startswith("**Article 1's speed-up is its BatchNorm models computing one block of six.**")
    agreeing = claims.assign(outcome=claims["outcome"].where(~ratios, "agrees"))
    assert readme.lead_sentences(agreeing)[0].startswith("**Article 1's timing gains")  # no headline the data deny


def test_the_front_page_names_every_scale_its_outputs_come_from(tmp_path):
    from vitbn_nb.publishing.book_html import profiles_shown

    outputs = {"a": {"profile": "cpu"}, "b": {"profile": "paper"}, "c": {"profile": "paper"}}
    (tmp_path / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    assert profiles_shown(tmp_path, "cpu") == "`cpu`; its outputs: 1 at `cpu`, 2 at `paper`"
    (tmp_path / "manifest.json").write_text(json.dumps({"outputs": {"a": {"profile": "cpu"}}}))
    assert profiles_shown(tmp_path, "cpu") == "`cpu`"


def test_the_forest_plot_shows_every_claim_with_an_interval_and_leaves_the_others_out(tmp_path, monkeypatch):
    copy = tmp_path / "figures"
    copy.mkdir()
    _claims_csv(
        copy,
        [
            ("article2/depth/lr0.003/d6", [2.0, 3.0, 2.5], ""),
            ("article2/depth/lr0.003/d7", [1.0], ""),  # one seed: shown, not judged, no interval
            ("article2/fig10/d3", [-1.0, 1.0, 0.2], "both at depth 3"),
        ],
    )
    claims = forest.judged(copy)
    assert sorted(claims["claim"]) == ["article2/depth/lr0.003/d6", "article2/fig10/d3"]
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(copy))
    forest.save(copy)
    entry = json.loads((copy / "manifest.json").read_text())["outputs"][forest.NAME]
    assert (copy / f"{forest.NAME}.png").is_file() and entry["data"] == f"{forest.NAME}_data.csv"
    assert len(pd.read_csv(copy / entry["data"])) == 2


def test_the_findings_caption_dates_the_data_from_the_manifest_not_the_store(tmp_path, monkeypatch):
    """The day the lead figure's runs end is the manifest's, so the README reads the same wherever it is rewritten:
    with the committed records readable or not, and on any later day."""
    folder = tmp_path / "figures"
    shutil.copytree(FIGURES, folder, ignore=shutil.ignore_patterns("records"))
    manifest = json.loads((folder / "manifest.json").read_text())
    lead = manifest["outputs"][readme.lead_figure(folder)]
    lead.update(runs_up_to="2001-02-03", date="2009-08-07")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    captions = []
    for records in ("use", "ignore"):
        monkeypatch.setenv("VITBN_COMMITTED_RECORDS", records)
        captions.append(readme.findings_block(folder))
    assert captions[0] == captions[1]
    assert "runs up to 2001-02-03" in captions[0] and "2009-08-07" not in captions[0]


def test_article_2s_headline_rests_on_its_confirmatory_verdicts_and_waits_for_the_replication():
    """The lr 0.003 contrast is exploratory (half its runs trained before its plan): the conclusion's headline says it
    holds only once the replication on fresh seeds decides and agrees, and names what it rests on; the README's
    findings and chapter 05's takeaway say the same paragraph."""
    from vitbn_nb.judging import verdicts
    from vitbn_nb.publishing import results

    claims = pd.read_csv(ROOT / "figures" / "05_claims.csv", keep_default_na=False)
    redo = claims["claim"] == "article2/confirm/primary/lr0.003"
    waiting = claims.assign(outcome=claims["outcome"].where(~redo, verdicts.NOT_JUDGED))
    said = results.article2_conclusion(waiting)
    claim = "beyond a critical depth ViTBNFFN converges faster than ViT"
    assert said.startswith(f"**Article 2's conclusion** ({claim}), read as") and "agrees (confirmatory)" in said
    assert "At lr 0.003 it stays exploratory until its replication on fresh seeds decides (" in said
    assert said in readme.lead_sentences(waiting) and said in results.takeaway_text(waiting, "paper")
    decided = lambda outcome: claims.assign(
        outcome=claims["outcome"].where(~redo, outcome),
        shown=claims["shown"].where(~redo, "+3.0 pt [+1.0, +5.0] (15 seeds)"),
        seeds=claims["seeds"].where(~redo, 15),
    )
    agreeing = results.article2_conclusion(decided(verdicts.AGREES))
    assert agreeing.startswith(f"**Article 2's conclusion holds**: {claim}, read as")
    rests = "At lr 0.003 it rests on its replication on fresh seeds: +3.0 pt [+1.0, +5.0] (15 seeds)"
    assert f"{rests}, agrees (confirmatory)." in agreeing
    noise = results.article2_conclusion(decided(verdicts.NOISE))
    assert (
        noise.startswith(f"**Article 2's conclusion** ({claim})") and f"{rests}, within noise (confirmatory)." in noise
    )
    # once the replication decides, the README's first screen still fits its budget with the longer paragraph
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:60])
    now = results.article2_conclusion(claims)
    assert now in first_screen and len(first_screen.replace(now, agreeing).split()) < 600
    assert results.article2_conclusion(claims[~claims["claim"].str.contains("primary")]) is None


def test_the_forest_caption_names_each_chapters_profile_not_only_the_smallest():
    """A referee read "Profile `cpu`" under the forest of claims, while article 2's claims were judged at `paper`: a
    figure over chapters of several profiles names each, a figure of one profile keeps its one word."""
    several = {"profile": "cpu", "profiles": {"paper": ["01", "05"], "cpu": ["03"]}}
    assert readme._profiles(several) == "Rendered at `paper` (01, 05), `cpu` (03)"
    assert readme._profiles({"profile": "paper", "profiles": {"paper": ["01", "05"]}}) == "Profile `paper`"
    assert readme._profiles({"profile": "smoke"}) == "Profile `smoke`"


def test_chapter_05_lists_every_primary_contrast_first_the_replications_beside_the_first_ones():
    """A referee found the replication's primary contrast last, after every secondary cell, where the chapter's text
    promises the primary contrasts first: the claims table puts every primary contrast first, each group in order."""
    from vitbn_nb.judging import verdicts

    found = [
        verdicts.Verdict("first/lr0.003", verdicts.AGREES, role=verdicts.PRIMARY),
        verdicts.Verdict("cell/d2", verdicts.NOISE, role=verdicts.SECONDARY),
        verdicts.Verdict("cell/d3", verdicts.NOISE, role=verdicts.SECONDARY),
        verdicts.Verdict("confirm/lr0.003", verdicts.NOT_JUDGED, role=verdicts.PRIMARY),
        verdicts.Verdict("confirm/d2", verdicts.EQUIVALENT, role=verdicts.SECONDARY),
    ]
    ordered = [v.claim for v in verdicts.primary_first(found)]
    assert ordered == ["first/lr0.003", "confirm/lr0.003", "cell/d2", "cell/d3", "confirm/d2"]
    claims = pd.read_csv(FIGURES / "05_claims.csv", keep_default_na=False)  # and the chapter's saved table does so
    roles = claims["role"].tolist()
    assert roles == sorted(roles, key=lambda role: role != "primary") and "article2/confirm/primary/lr0.003" in set(
        claims["claim"].head(roles.count("primary"))
    )


def test_a_replication_waiting_for_its_seeds_reads_as_waiting_with_no_label():
    """A reader met "+5.2 pt (2 seeds), shown, not judged, confirmatory": a label beside no verdict. A primary contrast
    that waits for its planned seeds says how many are trained, and carries no label until it is judged."""
    from vitbn_nb.judging import verdicts

    row = lambda outcome, note: pd.Series(dict(outcome=outcome, note=note, evidence="confirmatory"))
    waiting = row(verdicts.NOT_JUDGED, "2 seeds: ...; 2 of the 15 planned seeds held on one data stream")
    assert readme._waiting(waiting) == "not judged until its planned seeds are complete (2 of 15)"
    assert readme._waiting(row(verdicts.AGREES, "")) == ""
    assert readme._waiting(row(verdicts.NOT_JUDGED, "2 seeds")) == ""  # fewer than 3 seeds, no plan behind it
