"""The one decision rule, on made-up numbers: each outcome, too few seeds, an untestable scale."""

import math
from pathlib import Path

import pandas as pd
import pytest

from vitbn_nb.judging import rule_text, selection, verdicts

#: The rule's 2 pt ceiling (accuracies below 95 %), for tests of the rule itself.
TWO_PT = verdicts.Margin(None, 90.0, "a test's")


def test_an_interval_on_the_articles_side_agrees():
    judged = verdicts.difference("c", [1.0, 1.5, 2.0], +1)
    assert judged.outcome == verdicts.AGREES
    assert judged.low > 0 and judged.seeds == 3
    assert math.isclose(judged.estimate, 1.5)


def test_an_interval_on_the_other_side_disagrees():
    assert verdicts.difference("c", [-1.0, -1.5, -2.0], +1).outcome == verdicts.DISAGREES
    assert verdicts.difference("c", [1.0, 1.5, 2.0], -1).outcome == verdicts.DISAGREES


def test_an_interval_holding_zero_is_within_noise():
    judged = verdicts.difference("c", [1.0, -0.8, 0.5], +1)
    assert judged.outcome == verdicts.NOISE
    assert judged.low < 0 < judged.high


def test_a_comparable_claim_is_an_equivalence_within_the_margin():
    judged = verdicts.difference("c", [0.2, -0.3, 0.1], 0, margin=TWO_PT)
    assert judged.outcome == verdicts.EQUIVALENT and judged.level == 0.90 and judged.margin == verdicts.MARGIN_PT
    assert judged.p < verdicts.ALPHA  # the two one-sided tests reject "beyond the margin"
    assert verdicts.difference("c", [3.0, 3.2, 2.9], 0, margin=TWO_PT).outcome == verdicts.NOT_EQUIVALENT
    undecided = verdicts.difference(
        "c", [4.0, -3.0, 0.5], 0, margin=TWO_PT
    )  # an interval holding zero is not equivalence
    assert undecided.outcome == verdicts.UNDECIDED and undecided.low < 0 < undecided.high
    assert "within noise" not in undecided.text


def test_a_within_noise_states_the_difference_its_seeds_could_have_detected():
    judged = verdicts.difference("c", [1.0, -0.8, 0.5], +1)
    sd = pd.Series([1.0, -0.8, 0.5]).std()
    # 80 % power, two-sided 5 %, 2 degrees of freedom: about 3.3 standard deviations (the referee's figure)
    assert 3.0 < judged.detectable / sd < 3.6
    assert f"detectable: {judged.detectable:.1f} pt with 3 seeds" in judged.text
    family = verdicts.difference("c", [1.0, -0.8, 0.5], +1, spread=2 * sd)
    assert math.isclose(family.detectable, 2 * judged.detectable)  # the family's spread, not the cell's own
    assert verdicts.difference("c", [1.0, -0.8, 0.5] * 4, +1).detectable < judged.detectable  # more seeds, less


def test_the_seeds_a_plan_needs_fall_as_the_effect_grows():
    need = lambda effect: verdicts.seeds_to_detect(effect, spread=3.0)
    assert need(2.0) > need(4.0) > need(8.0) >= verdicts.MIN_SEEDS
    assert verdicts.detectable_difference(3.0, need(2.0)) <= 2.0 < verdicts.detectable_difference(3.0, need(2.0) - 1)
    assert verdicts.seeds_for_equivalence(2.0, 1.0) < verdicts.seeds_for_equivalence(2.0, 2.0)


def test_collapses_are_counted_with_exact_intervals_and_fishers_test():
    curve = lambda accs, diverged=False: pd.DataFrame(
        {"epoch": range(1, len(accs) + 1), "test_acc": accs, "diverged": [False] * (len(accs) - 1) + [diverged]}
    )
    assert verdicts.collapsed(curve([90, 95, 80]))  # ends 15 below its best
    assert verdicts.collapsed(curve([90, 70, 94]))  # unstable whatever the ending: a 20 pt plunge, recovered
    assert not verdicts.collapsed(curve([90, 85, 94]))  # a 5 pt dip is no instability
    plunge = verdicts.fall(curve([80, 96.3, 90, 82.7, 96.0]))
    assert plunge.points == pytest.approx(13.6) and (plunge.best_epoch, plunge.trough_epoch) == (2, 4)
    assert plunge.recovered and "recovered" in plunge.text
    assert not verdicts.fall(curve([90, 95, 80])).recovered
    assert verdicts.collapsed(curve([90, 91], diverged=True))
    judged = verdicts.counts("c", [True] * 8, [False] * 8, +1)
    assert judged.outcome == verdicts.AGREES and judged.p < 0.001 and judged.collapsed == 8 and judged.runs == 8
    assert judged.rate_low > 60 and judged.rate_high_base < 40  # Clopper–Pearson at 95 %
    assert "8/8" in judged.shown and "0/8" in judged.shown
    three = verdicts.counts("c", [True] * 3, [False] * 3, +1)
    # 3 of 3 against 0 of 3 gives p = 0.10: no count of 3 runs against 3 can decide, so the rule says so
    assert three.outcome == verdicts.NOT_DECIDABLE and math.isclose(three.p, 0.1)
    assert three.text.startswith("not decidable: 3 runs against 3") and verdicts.is_rule_text(three.text)
    assert math.isfinite(three.detectable) is False or three.detectable == 100.0
    assert verdicts.counts("c", [False] * 8, [True] * 8, +1).outcome == verdicts.DISAGREES


def test_holms_correction_decides_a_figures_cells_again():
    strong = verdicts.difference("a", [1.0, 1.1, 0.9, 1.05], +1)
    weak = verdicts.difference("b", [0.6, 1.5, 0.4, 1.2], +1)  # p = 0.036 alone
    assert strong.outcome == weak.outcome == verdicts.AGREES
    corrected = verdicts.holm([strong, weak, verdicts.difference("c", [1.0, -1.0, 0.1, -0.3], +1)])
    assert all(v.role == verdicts.SECONDARY for v in corrected)
    assert corrected[0].outcome == verdicts.AGREES and corrected[0].p_holm >= corrected[0].p
    assert math.isclose(corrected[1].p_holm, 2 * weak.p)  # the second smallest of three, times two
    assert corrected[1].outcome == verdicts.NOISE and "Holm p = 0.073" in corrected[1].text


@pytest.mark.parametrize("values", [[5.0], [5.0, 6.0]])
def test_fewer_than_three_seeds_are_shown_not_judged(values):
    judged = verdicts.difference("c", values, +1)
    assert judged.outcome == verdicts.NOT_JUDGED
    assert "not judged" in judged.text
    assert ("one seed" in judged.text) == (len(values) == 1)


def test_only_a_difference_is_shown_signed():
    assert verdicts.difference("c", [1.0, 1.5, 2.0], +1).shown.startswith("+1.5 pt [+")
    accuracy = verdicts.equivalence("c", [90.0, 91.0, 92.0], TWO_PT, center=91.0, unit="%")
    assert accuracy.shown.startswith("91.0 % [89.3, 92.7]")  # a value, not a difference (its 90 % interval)


def test_no_runs_is_not_run_and_nan_values_do_not_count():
    assert verdicts.difference("c", [], +1).outcome == verdicts.NOT_RUN
    assert verdicts.difference("c", [1.0, float("nan"), 2.0], +1).seeds == 2


def test_the_interval_is_students_t_at_95_percent():
    mean, _low, high, n = verdicts.interval([1.0, 2.0, 3.0])
    # t(0.975, 2) = 4.303; sd = 1; half width = 4.303 / sqrt(3)
    assert n == 3 and mean == 2.0
    assert math.isclose(high - mean, 4.302652729749464 / math.sqrt(3), rel_tol=1e-9)


def test_an_accuracy_interval_stays_within_what_an_accuracy_can_take():
    # two seeds near 97.4 %, one that collapsed (as chapter 03's ViTBN d6 at lr 0.01 did)
    collapsed = [97.5, 97.3, 38.9]
    _, low, high, _ = verdicts.interval(collapsed)
    assert low < 0 and high > 100  # Student's t alone runs past both ends
    _, low_b, high_b, _ = verdicts.interval(collapsed, bounds=verdicts.ACCURACY_BOUNDS)
    assert (low_b, high_b) == (0.0, 100.0)
    judged = verdicts.above("ViTBN above 97 %", collapsed, 97.0, bounds=verdicts.ACCURACY_BOUNDS, unit="%")
    assert (judged.low, judged.high) == (0.0, 100.0) and judged.outcome == verdicts.NOISE
    near_zero = verdicts.equivalence(
        "chance", [0.5, 9.0, 1.0], verdicts.Margin(4.0, 3.0, "t"), center=2.0, bounds=verdicts.ACCURACY_BOUNDS
    )
    assert near_zero.low == 0.0 and near_zero.outcome == verdicts.UNDECIDED
    # a gain or a difference has no such ends: nothing is cut
    assert verdicts.difference("d", [-60.0, 50.0, 120.0], +1).high > 100


def test_an_untestable_scale_says_how_much_was_reached():
    judged = verdicts.untestable("c", 1_000, 18_000)
    assert judged.outcome == verdicts.UNTESTABLE
    assert judged.text == "not testable at this scale (1,000 of the article's 18,000 steps)"


def test_above_judges_a_level_and_shows_the_measured_value():
    judged = verdicts.above("gain", [76.0, 78.0, 79.0], 60.0, unit="%")
    assert judged.outcome == verdicts.AGREES and judged.low > 60
    assert verdicts.above("gain", [40.0, 42.0, 41.0], 60.0, unit="%").outcome == verdicts.DISAGREES


def test_a_bad_direction_or_outcome_is_refused():
    with pytest.raises(ValueError, match="direction"):
        verdicts.difference("c", [1.0], 2)
    with pytest.raises(ValueError, match="outcome"):
        verdicts.Verdict("c", "maybe")


def test_curves_are_read_whole():
    steady = pd.DataFrame({"epoch": [1, 2, 3], "test_acc": [50.0, 70.0, 80.0], "diverged": False})
    broken = pd.DataFrame({"epoch": [1, 2, 3], "test_acc": [60.0, 75.0, 30.0], "diverged": False})
    assert verdicts.largest_fall(steady) == 0.0
    assert verdicts.largest_fall(broken) == 45.0
    assert verdicts.mean_accuracy(steady) == pytest.approx(200 / 3)


def test_a_run_that_says_nothing_of_divergence_is_not_diverged():
    silent = pd.DataFrame({"epoch": [1, 2], "test_acc": [50.0, 80.0], "diverged": [float("nan")] * 2})
    diverged = silent.assign(diverged=[False, True])
    assert verdicts.largest_fall(silent) == 0.0 and not verdicts.collapsed(silent)
    assert verdicts.largest_fall(diverged) == 70.0 and verdicts.collapsed(diverged)


def test_paired_differences_follow_the_seeds():
    rows = [
        {"model": m, "seed": s, "epoch": e, "test_acc": acc + (5 if m == "B" else 0)}
        for m in ("A", "B")
        for s, acc in ((0, 50.0), (1, 60.0), (2, 70.0))
        for e in (1, 2)
    ]
    table = pd.DataFrame(rows)
    mean = lambda model: selection.per_seed(selection.select(table, model=model), verdicts.mean_accuracy)
    diffs = selection.paired(mean("B"), mean("A"))
    assert list(diffs) == [5.0, 5.0, 5.0]


def test_no_verdict_in_the_committed_figures_is_issued_outside_the_rule():
    """Every cell of a 'verdict' column in figures/ is the rule's wording, or says it is not a claim."""
    from pathlib import Path

    figures = Path(__file__).resolve().parent.parent / "figures"
    checked = 0
    for path in sorted(figures.glob("*.csv")):
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
        for column in (c for c in table.columns if "verdict" in c):
            for text in table[column]:
                if text in ("", "—") or text.startswith("not a claim"):
                    continue
                assert verdicts.is_rule_text(text), f"{path.name}, column {column!r}: {text!r} is not the rule's"
                checked += 1
    assert checked > 0


def test_every_committed_verdict_over_seeds_rests_on_at_least_three():
    """Issue 24's bar, read from what is committed: a claim judged from seeds (agrees, disagrees, within noise) in
    any chapter's claims table, and every judged row of the learning-rate sweep, has at least MIN_SEEDS seeds."""
    from pathlib import Path

    figures = Path(__file__).resolve().parent.parent / "figures"
    judged = (verdicts.AGREES, verdicts.DISAGREES, verdicts.NOISE, verdicts.EQUIVALENT, verdicts.NOT_EQUIVALENT)
    judged += (verdicts.UNDECIDED,)
    checked = 0
    for path in sorted(figures.glob("*_claims.csv")):
        table = pd.read_csv(path)
        rows = table[table["outcome"].isin(judged) & (table["each"] == "seed")]
        thin = rows[rows["seeds"] < verdicts.MIN_SEEDS]
        assert thin.empty, f"{path.name}: {list(thin['claim'])} judged from fewer than {verdicts.MIN_SEEDS} seeds"
        checked += len(rows)
    sweep = pd.read_csv(figures / "03_lr_sweep_table.csv", dtype={"verdict: ahead of ViT": str}, keep_default_na=False)
    judged_rows = sweep[sweep["verdict: as good as the best lr"].str.startswith(judged)]
    assert (judged_rows["seeds"].astype(int) >= verdicts.MIN_SEEDS).all()
    assert checked > 0 and len(judged_rows) > 0


def test_the_rule_text_check_tells_the_rules_words_from_others():
    assert verdicts.is_rule_text(verdicts.difference("c", [1.0], +1, scale="x").text)
    assert verdicts.is_rule_text(verdicts.difference("c", [1.0, 2.0, 3.0], +1).text)
    assert verdicts.is_rule_text(verdicts.untestable("c", 1, 2).text)
    assert not verdicts.is_rule_text("within ± 20 %")
    assert not verdicts.is_rule_text("ViTBNFFN better")


# -- speed ratios measured here: interleaved rounds -----------------------------------------------------------


def test_a_speed_ratio_is_judged_from_its_rounds_each_way():
    faster = verdicts.speed_ratio("x", [110, 112, 111, 109], [100, 101, 100, 99])
    assert faster.outcome == verdicts.AGREES and faster.low > 1 and faster.each == "round"
    assert verdicts.speed_text(faster).startswith("a speed-up of 1.10× [")
    slower = verdicts.speed_ratio("x", [90, 91, 92], [100, 100, 101])
    assert verdicts.speed_text(slower).startswith("no speed-up, slower: 0.91× [") and slower.high < 1
    noisy = verdicts.speed_ratio("x", [100, 105, 95], [101, 99, 100])
    assert verdicts.speed_text(noisy).startswith("within noise: ") and noisy.low < 1 < noisy.high
    few = verdicts.speed_ratio("x", [110, 120], [100, 100])
    assert verdicts.speed_text(few) == "2 rounds: shown, not judged: 1.15×"
    for verdict in (faster, slower, noisy, few):
        assert verdicts.is_rule_text(verdicts.speed_text(verdict))


def test_a_busy_spell_common_to_both_timings_of_a_round_cancels():
    """Round 2 ran on a machine twice as busy: alone it would look like noise, paired it does not."""
    model, baseline = [110, 55, 111], [100, 50, 101]
    paired = verdicts.speed_ratio("x", model, baseline)
    assert paired.outcome == verdicts.AGREES and abs(paired.estimate - 1.1) < 0.01
    # the same numbers unpaired (the model's round 2 against the baseline's round 1) are not a clear speed-up
    shuffled = verdicts.speed_ratio("x", model, [50, 100, 101])
    assert shuffled.outcome == verdicts.NOISE


def test_the_interval_of_a_speed_ratio_is_the_rules_interval_of_the_log_ratios_shown_as_a_ratio():
    model, baseline = [120.0, 100.0, 130.0, 90.0], [100.0, 95.0, 110.0, 85.0]
    logs = [math.log(a / b) for a, b in zip(model, baseline)]
    mean, low, high, n = verdicts.interval(logs)
    judged = verdicts.speed_ratio("x", model, baseline)
    assert judged.seeds == n == 4
    assert (judged.estimate, judged.low, judged.high) == pytest.approx((math.exp(mean), math.exp(low), math.exp(high)))
    # the other way round, the baseline against the model: the reciprocal ratio and interval
    swapped = verdicts.speed_ratio("x", baseline, model)
    assert (swapped.estimate, swapped.low, swapped.high) == pytest.approx(
        (1 / judged.estimate, 1 / judged.high, 1 / judged.low)
    )


def test_a_ratio_of_two_speed_ratios_is_worded_above_or_below_1():
    below = verdicts.speed_ratio("x", [0.77, 0.78, 0.76], [1.0, 1.0, 1.0])
    assert verdicts.factor_text(below).startswith("below 1: 0.77× [")
    above = verdicts.speed_ratio("x", [1.2, 1.21, 1.19], [1.0, 1.0, 1.0])
    assert verdicts.factor_text(above).startswith("above 1: 1.20× [")
    noisy = verdicts.speed_ratio("x", [0.9, 1.1, 1.0], [1.0, 1.0, 1.0])
    assert verdicts.factor_text(noisy).startswith("within noise: 1.00× [")
    few = verdicts.speed_ratio("x", [0.5], [1.0])
    assert verdicts.factor_text(few) == "1 round: shown, not judged: 0.50×"
    for verdict in (below, above, noisy, few):
        assert verdicts.is_rule_text(verdicts.factor_text(verdict))
    assert verdicts.factor_text(verdicts.speed_ratio("x", [], [])) == verdicts.NOT_RUN


def test_the_rule_s_text_names_the_speed_words_it_issues():
    text = rule_text.rule_markdown()
    for words in (verdicts.SPEEDUP, verdicts.SLOWER_WORDS, verdicts.NOISE, verdicts.NOT_JUDGED):
        assert words in text


def test_rounds_that_do_not_pair_up_are_refused():
    with pytest.raises(ValueError, match="must pair up"):
        verdicts.speed_ratio("x", [1, 2, 3], [1, 2])


def test_an_article_s_about_x_is_judged_as_near_x_not_as_above_it():
    close = verdicts.equivalence("x", [98.1, 98.3, 98.2], TWO_PT, center=98.2, unit="%")
    assert close.outcome == verdicts.EQUIVALENT and abs(close.estimate - 98.2) < 1e-9
    above = verdicts.equivalence("x", [101.4, 101.5, 101.6], TWO_PT, center=98.2, unit="%")
    assert above.outcome == verdicts.NOT_EQUIVALENT  # far above "≈ 98.2" is not what the article said either
    wide = verdicts.equivalence("x", [60.0, 90.0, 84.0], TWO_PT, center=78.0, unit="%")
    assert wide.outcome == verdicts.UNDECIDED  # an interval of [47, 104] decides nothing
    assert verdicts.equivalence("x", [98.0], TWO_PT, center=98.2).outcome == verdicts.NOT_JUDGED


def test_a_label_counts_the_seeds_not_the_runs_that_share_one():
    from vitbn_nb.publishing import figures

    runs = pd.DataFrame(
        [
            dict(run_id=f"{model}-s{seed}", model=model, seed=seed, epoch=epoch, train_size=5000)
            for model in ("ViT", "ViTBN", "ViTBNFFN", "CNN")
            for seed in (0, 1, 2)
            for epoch in (1, 2)
        ]
    )
    assert figures.spread_label(runs).startswith("mean over 3 seeds, band = min-max; 5,000 training images × 2 epochs")
    one = runs[runs["seed"] == 0]
    assert figures.spread_label(one).startswith("one seed per curve (no spread)")
    uneven = runs[(runs["model"] != "CNN") | (runs["seed"] == 0)]  # three curves of 3 seeds, one of 1
    assert figures.spread_label(uneven).startswith("mean over 1–3 seeds, band = min-max")


# -- what the committed claims tables must show (issue 46's checks, read from figures/) ----------------------------

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def test_article_2s_claims_lead_with_the_primary_contrast_and_say_what_they_could_detect():
    table = pd.read_csv(FIGURES / "05_claims.csv")
    assert table["claim"].iloc[0].startswith("article2/primary/") and table["role"].iloc[0] == verdicts.PRIMARY
    noise = table[table["outcome"] == verdicts.NOISE]
    assert noise["detectable"].notna().all() and (noise["detectable"] > 0).all()
    judged = ~table["outcome"].isin([verdicts.NOT_RUN, verdicts.UNTESTABLE, verdicts.NOT_JUDGED])
    comparable_or_absolute = (table["kind"] == "absolute") | table["says"].str.contains("comparable|much the same")
    rows = table[judged & comparable_or_absolute]
    assert len(rows) > 0 and (rows["test"] == verdicts.EQUIVALENCE_TEST).all()
    assert rows["outcome"].isin([verdicts.EQUIVALENT, verdicts.NOT_EQUIVALENT, verdicts.UNDECIDED]).all()


def test_article_1s_stability_is_counted_with_exact_intervals_and_fishers_test():
    table = pd.read_csv(FIGURES / "03_claims.csv")
    stability = table[table["claim"].str.contains("breakdown|larger_lr") & table["scale"].str.startswith("18,000 of")]
    assert len(stability) > 0 and (stability["test"] == verdicts.COUNT_TEST).all()
    for column in ("collapsed", "runs", "collapsed_base", "runs_base", "rate_low", "rate_high", "p"):
        assert stability[column].notna().all(), column


def test_no_convergence_claim_short_of_the_articles_protocol_is_decided():
    import re

    checked = 0
    for path in sorted(FIGURES.glob("*_claims.csv")):
        table = pd.read_csv(path, keep_default_na=False)
        curves = table[table["measure"].str.contains("mean test accuracy over the epochs")]
        for _, row in curves[curves["outcome"].isin([verdicts.AGREES, verdicts.DISAGREES])].iterrows():
            reached = [
                (int(a.replace(",", "")), int(b.replace(",", "")))
                for a, b in re.findall(r"([\d,]+) of (?:the article's )?([\d,]+)", row["scale"])
            ]
            assert reached and all(a >= b for a, b in reached), f"{path.name}: {row['claim']} decided at {row['scale']}"
            checked += 1
    assert checked > 0  # chapter 01 decides article 2's Fig 1 at its whole protocol


def test_an_accuracys_interval_stops_at_100_and_a_differences_does_not():
    from vitbn_nb.publishing import results

    shown = results.accuracy([99.9, 99.8, 60.0])
    assert shown.high == 100.0 and shown.low > 0 and str(shown).endswith(", 100.0]")
    assert results.spread([99.9, 99.8, 60.0]).high > 100  # a plain spread knows no bounds
    assert results.accuracy([97.0]).n == 1 and "1 seed" in str(results.accuracy([97.0]))
