"""Every chapter's settings: the paper protocol as defaults, the smaller profiles as differences, typed."""

import dataclasses
import html
from pathlib import Path

import pytest

from vitbn_nb import chapters, profiles

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("chapter", list(chapters.SETTINGS))
def test_every_profile_builds_every_chapters_settings_from_the_paper_defaults(chapter):
    kind = chapters.SETTINGS[chapter]
    paper = chapters.settings(chapter, "paper")
    assert paper == kind(profile="paper")  # paper is the dataclass's defaults, nothing else
    for name in ("cpu", "smoke"):
        chosen = chapters.settings(chapter, name)
        changed = {f.name for f in dataclasses.fields(kind) if getattr(chosen, f.name) != getattr(paper, f.name)}
        assert changed <= {"profile", *chapters.changes(chapter, name)}


def test_settings_are_frozen_and_overrides_of_none_keep_the_profile():
    settings = chapters.settings("03_fixed_lr", "cpu", epochs=None)
    assert settings.epochs == chapters.settings("03_fixed_lr", "cpu").epochs
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.epochs = 3
    with pytest.raises(TypeError):
        chapters.settings("05_depth_study", "cpu").depths[0.003] = (1,)  # the mapping is read-only too


@pytest.mark.parametrize(
    "chapter, override, field",
    [
        ("03_fixed_lr", dict(seeds=True), "seeds"),  # a bool is not a count
        ("03_fixed_lr", dict(lrs=0.01), "lrs"),  # one number is not a list
        ("03_fixed_lr", dict(train_size=1), "train_size"),
        ("06_emnist_transfer", dict(cnn_lr="fast"), "cnn_lr"),  # a string that is no number
        ("05_depth_study", dict(fig8_depths="[4, 'five']"), r"fig8_depths\[1\]"),
        ("07_three_things", dict(models=["ViT", 3]), r"models\[1\]"),
        ("08_where_the_speed_comes_from", dict(models=["ResNet"]), "models"),
        ("08_where_the_speed_comes_from", dict(norm_seconds=0), "norm_seconds"),
    ],
)
def test_ill_typed_overrides_are_refused_naming_the_field(chapter, override, field):
    with pytest.raises(ValueError, match=field):
        chapters.settings(chapter, "smoke", **override)


def test_unknown_names_and_profiles_are_refused():
    with pytest.raises(ValueError, match=r"no setting 'lr' \(did you mean 'lrs'\?\)"):
        chapters.settings("03_fixed_lr", "smoke", lr=0.1)
    with pytest.raises(ValueError, match="profile='laptop'"):
        chapters.settings("03_fixed_lr", "laptop")
    with pytest.raises(ValueError, match="chapter='09_more'"):
        chapters.settings("09_more", "smoke")


def test_a_notebook_shows_the_settings_as_a_table():
    shown = chapters.settings("01_batchnorm_intro", "smoke")._repr_html_()
    assert "<table>" in shown and "IntroSettings" in shown and "lrs" in shown


def test_a_cpu_chapter_showing_paper_runs_says_so_above_its_settings():
    from vitbn_nb import chapters

    plain = chapters.settings("03_fixed_lr", "cpu")
    assert plain.scale_note() == "" and "paper protocol" not in plain._repr_html_()
    mixed = chapters.settings("03_fixed_lr", "cpu", full_protocol_lrs=(0.0005, 0.005))
    note = mixed.scale_note()
    assert note.startswith("At lr 0.0005, 0.005 this chapter shows the paper protocol's runs (epochs 30")
    assert "train_size None" in note and html.escape(note) in mixed._repr_html_()


def test_one_syntax_sets_a_setting_from_papermill_the_command_line_and_code():
    """papermill's ``-p epochs 3`` gives 3, ``-p fig8_depths "[4, 6]"`` and ``--set`` give strings: each is read as a
    literal where its field is not a string, and checked where the settings are built."""
    given = dict(profiles.parse_assignment(text) for text in ("epochs=3", "fig8_depths=[4, 6]", "confirmation=false"))
    assert given == {"epochs": "3", "fig8_depths": "[4, 6]", "confirmation": "false"}
    chosen = chapters.settings("05_depth_study", "smoke", **given)
    assert chosen.epochs == 3 and chosen.fig8_depths == (4, 6) and chosen.confirmation is False
    assert chosen == chapters.settings("05_depth_study", "smoke", epochs=3, fig8_depths=[4, 6], confirmation=False)
    assert chapters.settings("05_depth_study", "smoke", engine="eager").engine == "eager"  # a string stays one
    with pytest.raises(ValueError, match="NAME=VALUE"):
        profiles.parse_assignment("epochs")


def test_a_setting_that_differs_from_the_protocol_names_its_own_variant():
    assert chapters.variant(chapters.settings("05_depth_study", "smoke")) == ""
    assert chapters.variant(chapters.settings("05_depth_study", "smoke", train=False)) == ""  # not the protocol
    assert chapters.variant(chapters.settings("05_depth_study", "smoke", epochs=3)) == "epochs-3"
    assert chapters.variant(chapters.settings("05_depth_study", "smoke", epochs=2)) == ""  # smoke's own value
    some = chapters.settings("05_depth_study", "smoke", epochs=3, fig8_depths=(4, 5))
    assert chapters.variant(some) == "epochs-3_fig8_depths-4-5"
    many = {"fig9_depths": (1, 2, 3, 4), "extra_models": ("ViTDyT", "ViTBN")}
    many = chapters.variant(chapters.settings("05_depth_study", "smoke", epochs=3, fig8_depths=(4, 5, 6, 7), **many))
    assert many.startswith("epochs-and-3-more-") and len(many) < 40  # a folder name stays short


def test_a_notebook_reads_its_settings_from_its_namespace_and_names_a_near_miss():
    namespace = {"profile": "smoke", "force": "false", "epochs": 3, "seeds": None, "In": [], "depth": chapters}
    settings, force = chapters.from_notebook("05_depth_study", namespace)
    assert settings.epochs == 3 and settings.seeds == chapters.settings("05_depth_study", "smoke").seeds
    assert force is False and settings.profile == "smoke"
    with pytest.raises(profiles.ParameterError, match=r"no setting 'epoch' \(did you mean 'epochs'\?\)"):
        chapters.from_notebook("05_depth_study", {"profile": "smoke", "epoch": 3})  # papermill's -p epoch 3
    with pytest.raises(profiles.ParameterError, match="epochs=0 is not allowed"):
        chapters.from_notebook("05_depth_study", {"profile": "smoke", "epochs": 0})
    _, _, measure = chapters.from_notebook(
        "08_where_the_speed_comes_from", {"profile": "smoke", "measure": "true"}, "measure"
    )
    assert measure is True


@pytest.mark.parametrize("chapter", list(chapters.SETTINGS))
def test_every_notebook_declares_each_setting_of_its_chapter_as_a_parameter(chapter):
    """papermill sets only what the parameters cell declares (and lists it with ``--help-notebook``)."""
    from vitbn_nb.publishing.book_chapters import declared_parameters

    declared = declared_parameters(ROOT / "notebooks" / f"{chapter}.ipynb")
    assert {"profile", "force", *chapters.setting_names(chapter)} <= declared
