"""What article 2 reports of its depth study (Figs 8-10), and the claims chapter 05 tests, keyed by figure and depth.
The words are the article's; the rates the settings' (:class:`.settings.DepthSettings`), which each claim's key and
measure follow."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ...judging.claims import ABSOLUTE, CURVE, DIFFERENCE, WORDING, Claim, worded_direction
from ...judging.verdicts import Margin

if TYPE_CHECKING:  # the settings default to this module's facts, so they import it, not the other way round
    from .settings import DepthSettings

#: What article 2 ran, as it reports it: the settings' ``paper`` defaults and the book's quotes of the article.
EPOCHS = 10
BATCH_SIZE = 100
RATES = {"fig8": 0.003, "fig9": 0.005}
DEPTHS = {"fig8": (4, 5, 6, 7), "fig9": (1, 2, 3, 4), "fig10": (2, 3, 4)}


class Cell(NamedTuple):
    """What article 2 reports of ViTBNFFN against ViT at one depth of Fig 8 or 9."""

    where: str  #: where it says it
    shown: str  #: what the chapter shows of it
    says: str  #: the words the claim is judged on
    lead: str  #: who leads in them ("" for neither)
    wording: str  #: the words of :data:`~vitbn_nb.judging.claims.WORDING` that give the claim's direction


class Fig10Cell(NamedTuple):
    """What article 2 reports at one depth of Fig 10 (the fall from Fig 8's rate to Fig 9's)."""

    says: str
    wording: str


#: Per (figure, depth) of Figs 8-9. "comparable" is the article's headline at d = 4, 5 (Fig 8) and d = 1 (Fig 9);
#: the slight lead it adds is within what "comparable" allows, so the claim judged is "comparable" (direction 0).
#: Depths 2-3 at Fig 8's rate are from its text ("d < 4: comparable").
_BELOW_4 = "accuracies stay comparable for d < 4"
_same = lambda where, words, lead, wording: Cell(where, words, words, lead, wording)  # shown as said
CELLS = {
    **{
        ("fig8", d): Cell("Fig 8 text", f"comparable (the text: {_BELOW_4})", _BELOW_4, "", "comparable")
        for d in (2, 3)
    },
    ("fig8", 4): _same("Fig 8", "comparable; ViT slightly better", "", "comparable"),
    ("fig8", 5): Cell(
        "Fig 8", "comparable; ViTBNFFN slightly ahead", "comparable; ViTBNFFN slightly exceeds ViT", "", "comparable"
    ),
    ("fig8", 6): _same("Fig 8", "ViTBNFFN significantly better", "ViTBNFFN", "significantly better"),
    ("fig8", 7): _same(
        "Fig 8", "ViTBNFFN significantly better (and for any d ≥ 6)", "ViTBNFFN", "significantly better"
    ),
    ("fig9", 1): _same("Fig 9", "comparable; ViT slightly better", "", "comparable"),
    ("fig9", 2): _same("Fig 9", "comparable; almost no difference", "", "almost no difference"),
    ("fig9", 3): Cell(
        "Fig 9",
        "ViTBNFFN slightly better",
        "ViTBNFFN's accuracy slightly higher than ViT's",
        "ViTBNFFN",
        "slightly higher",
    ),
    ("fig9", 4): _same("Fig 9", "ViTBNFFN clearly better (and for any d ≥ 4)", "ViTBNFFN", "clearly better"),
}
#: The accuracies at epoch 10 that article 2's text quotes for Fig 10 at d = 3 ("≈"), per model and figure rate:
#: absolute numbers of its whole protocol, judged only over runs that reached it.
FIG10_NUMBERS_DEPTH = 3
FIG10_NUMBERS = {("ViT", "fig8"): 91, ("ViT", "fig9"): 78, ("ViTBNFFN", "fig8"): 92, ("ViTBNFFN", "fig9"): 90}
#: The equivalence margins article 2 resolves (the rule's :class:`~vitbn_nb.judging.verdicts.Margin`), per measure.
#: Final accuracy: the smallest gap between the two models it reads as a difference is at d = 3 and Fig 9's rate, which
#: its Fig 9 text calls "slightly higher" and its Fig 10 text quotes at epoch 10 (ViTBNFFN ≈ 90 % against ViT ≈ 78 %);
#: the fall from one rate to the other: Fig 10's d = 3.
_at_d3 = lambda model, figure: FIG10_NUMBERS[model, figure]
_fall = lambda model: _at_d3(model, "fig8") - _at_d3(model, "fig9")
MARGINS = {
    "final accuracy": Margin(
        _at_d3("ViTBNFFN", "fig9") - _at_d3("ViT", "fig9"),
        _at_d3("ViTBNFFN", "fig9"),
        "between ViTBNFFN and ViT at d = 3 and lr 0.005 that article 2's Fig 9 text calls 'slightly higher' (the "
        "accuracies at epoch 10 its Fig 10 text quotes)",
    ),
    "fall": Margin(
        _fall("ViT") - _fall("ViTBNFFN"),
        _at_d3("ViTBNFFN", "fig8"),
        "between the two models' falls that article 2 calls 'milder' (Fig 10, d = 3)",
    ),
}
_quoted = lambda model: f"{model} ≈ {FIG10_NUMBERS[model, 'fig8']} % → ≈ {FIG10_NUMBERS[model, 'fig9']} %"
#: Fig 10 (accuracy at epoch 10 when lr goes from Fig 8's rate to Fig 9's), per depth: ViTBNFFN hit less than ViT is
#: "milder"; at d = 3 the article quotes numbers.
FIG10_CELLS = {
    2: Fig10Cell("both models are affected by the higher lr in much the same way", "affected much the same"),
    3: Fig10Cell(f"{_quoted('ViT')}; {_quoted('ViTBNFFN')} (epoch 10)", "milder"),
    4: Fig10Cell("as at d = 3 (the same qualitative feature holds at higher depth)", "milder"),
}

#: Article 2's conclusion from Figs 8 and 9, read off the whole curve as at its Fig 1 (each seed's mean test accuracy
#: over the epochs), at the depths each figure's text places beyond the critical depth ("any d ≥ 6", "any d ≥ 4").
CONVERGES = (
    "with a reasonable choice of learning rate and batch size, beyond a critical depth of the encoder, ViTBNFFN "
    "converges significantly faster than ViT"
)
BEYOND_CRITICAL = {"fig8": (6, 7), "fig9": (4,)}


def depth_key(settings: DepthSettings, figure: str, depth: int) -> str:
    return f"article2/depth/lr{settings.figure_lr(figure):g}/d{depth}"


def fig10_key(depth: int) -> str:
    return f"article2/fig10/d{depth}"


def fig10_number_key(settings: DepthSettings, model: str, figure: str) -> str:
    return f"article2/fig10/d{FIG10_NUMBERS_DEPTH}/{model}/lr{settings.figure_lr(figure):g}"


def primary_key(settings: DepthSettings, figure: str) -> str:
    return f"article2/primary/lr{settings.figure_lr(figure):g}"


def converges_key(settings: DepthSettings, figure: str, depth: int) -> str:
    return f"article2/converges/lr{settings.figure_lr(figure):g}/d{depth}"


def findings(settings: DepthSettings) -> list[Claim]:
    """The claims of Figs 8-10 as these settings test them (their keys and measures name the settings' rates): the
    primary contrast of each figure's rate first (article 2's conclusion, fixed in its plan), then the cells."""
    found = []
    for figure, depths in BEYOND_CRITICAL.items():
        lr, shown = settings.figure_lr(figure), ", ".join(map(str, depths))
        measure = (
            f"ViTBNFFN − ViT mean test accuracy over the epochs, averaged over d ∈ {{{shown}}}, lr {lr:g} (pt): the "
            "primary contrast"
        )
        where = "article 2, conclusion of Figs 8 and 9"
        found.append(Claim(primary_key(settings, figure), where, CONVERGES, CURVE, measure, +1, epochs=EPOCHS))
    for (figure, depth), cell in CELLS.items():
        measure = f"ViTBNFFN − ViT final accuracy at d = {depth}, lr {settings.figure_lr(figure):g} (pt)"
        direction = worded_direction(cell.lead, cell.wording)
        key, where = depth_key(settings, figure, depth), f"article 2, {cell.where}"
        margin = MARGINS["final accuracy"] if direction == 0 else None
        found.append(Claim(key, where, cell.says, DIFFERENCE, measure, direction, margin=margin))
    low, high = settings.fig8_lr, settings.fig9_lr
    for depth, cell in FIG10_CELLS.items():
        measure = f"ViT's fall − ViTBNFFN's fall in final accuracy, lr {low:g} → {high:g}, d = {depth} (pt)"
        direction = WORDING[cell.wording]
        margin = MARGINS["fall"] if direction == 0 else None
        found.append(
            Claim(fig10_key(depth), "article 2, Fig 10", cell.says, DIFFERENCE, measure, direction, margin=margin)
        )
    for (model, figure), level in FIG10_NUMBERS.items():
        lr, depth = settings.figure_lr(figure), FIG10_NUMBERS_DEPTH
        says = f"{model} ≈ {level} % at epoch {EPOCHS} (d = {depth}, lr {RATES[figure]:g})"  # the article's rate
        measure = f"{model} final accuracy at d = {depth}, lr {lr:g} (%)"
        key = fig10_number_key(settings, model, figure)
        margin = MARGINS["final accuracy"]
        found.append(Claim(key, "article 2, Fig 10 text", says, ABSOLUTE, measure, 0, level, EPOCHS, margin))
    for figure, depths in BEYOND_CRITICAL.items():
        lr = settings.figure_lr(figure)
        for depth in depths:
            measure = f"ViTBNFFN − ViT mean test accuracy over the epochs at d = {depth}, lr {lr:g} (pt)"
            where = "article 2, conclusion of Figs 8 and 9"
            found.append(Claim(converges_key(settings, figure, depth), where, CONVERGES, CURVE, measure, +1))
    return found
