"""One card per model: what the book knows of a model besides its class, in one entry (as timm registers each model
once). Its family (``"vit"``: built on the reference ViT configuration; ``"mlp"``; ``"cnn"``), what normalises it in
words, its colour in every figure, the depth it is built with when none is given, and how its line looks where the
families nearly coincide (chapter 2's sizes). A new model is one class and one card (:func:`register`); every
registry of the book (:data:`MODELS`, :data:`VIT_FAMILY`, :data:`DEFAULT_DEPTH`) reads the cards."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .cnn import CNN
from .dnn import DNN_d3, DNNBN_d3
from .vit import ViT, ViTBN, ViTBNFFN, ViTDyT

FAMILIES = ("vit", "mlp", "cnn")


@dataclass(frozen=True)
class Card:
    cls: type[nn.Module]
    family: str
    norms: str
    color: str
    default_depth: int | None = None
    look: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cls.__name__


#: The cards by model name, in the order the book lists its models.
CARDS: dict[str, Card] = {}


def register(card: Card) -> Card:
    """Add ``card``: its model is then built, trained, coloured and tabled like every other."""
    if card.family not in FAMILIES:
        raise ValueError(f"family={card.family!r} is not allowed; choose one of {', '.join(FAMILIES)}")
    if card.name in CARDS:
        raise ValueError(f"model {card.name!r} has a card already")
    if card.family == "vit" and not isinstance(card.default_depth, int):
        raise ValueError(f"model {card.name!r}: a ViT-family card names the depth it is built with (default_depth)")
    CARDS[card.name] = card
    return card


def unregister(name: str) -> None:
    """Remove a card (a test's model, once the test is done)."""
    CARDS.pop(name, None)


class _Classes(Mapping):
    """Each model's class by name, read from the cards as they are now."""

    def __getitem__(self, name: str) -> type[nn.Module]:
        return CARDS[name].cls

    def __iter__(self) -> Iterator[str]:
        return iter(list(CARDS))

    def __len__(self) -> int:
        return len(CARDS)


class _Family(Sequence):
    """The names of one family's models, in card order, read from the cards as they are now."""

    def __init__(self, family: str):
        self.family = family

    def _names(self) -> list[str]:
        return [name for name, card in CARDS.items() if card.family == self.family]

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(tuple(self._names()))


class _Depths(Mapping):
    """The depth each ViT-family model is built with when none is given."""

    def __getitem__(self, name: str) -> int:
        card = CARDS[name]
        if card.family != "vit":
            raise KeyError(name)
        return card.default_depth

    def __iter__(self) -> Iterator[str]:
        return iter(_Family("vit")._names())

    def __len__(self) -> int:
        return len(_Family("vit"))


MODELS: Mapping[str, type[nn.Module]] = _Classes()
VIT_FAMILY: Sequence[str] = _Family("vit")
DEFAULT_DEPTH: Mapping[str, int] = _Depths()

# The depths of article 1's three as run (ViT 6, its BatchNorm models 1: the reference code of that time returned after
# their first block), the build defaults, so that every run id keeps its meaning; the reference ViT's 6 otherwise.
register(Card(ViT, "vit", "LayerNorm only", "#4C72B0", 6, dict(marker="o", markersize=11, linewidth=7, alpha=0.35)))
register(
    Card(
        ViTBNFFN,
        "vit",
        "LayerNorm; BatchNorm in the FFN, none before it",
        "#DD8452",
        1,
        dict(marker="s", markersize=6, linewidth=2),
    )
)
register(Card(ViTBN, "vit", "BatchNorm everywhere", "#55A868", 1, dict(marker="D", markersize=5, linewidth=0)))
register(Card(DNN_d3, "mlp", "none", "#8172B3"))
register(Card(DNNBN_d3, "mlp", "BatchNorm before every sigmoid", "#C44E52"))
register(Card(CNN, "cnn", "BatchNorm after every convolution", "#937860"))
register(
    Card(
        ViTDyT,
        "vit",
        "DyT in place of every LayerNorm (no statistic at all)",
        "#DA8BC3",
        6,
        dict(marker="^", markersize=7, linewidth=1, linestyle=(0, (3, 2))),
    )
)
