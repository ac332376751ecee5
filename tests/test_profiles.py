"""Every chapter's settings: the paper protocol as defaults, the smaller profiles as differences, typed."""

import dataclasses
import html

import pytest

from vitbn_nb import chapters


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
        ("06_emnist_transfer", dict(cnn_lr="1e-3"), "cnn_lr"),
        ("07_three_things", dict(models=["ViT", 3]), r"models\[1\]"),
        ("08_where_the_speed_comes_from", dict(models=["ResNet"]), "models"),
        ("08_where_the_speed_comes_from", dict(norm_seconds=0), "norm_seconds"),
    ],
)
def test_ill_typed_overrides_are_refused_naming_the_field(chapter, override, field):
    with pytest.raises(ValueError, match=field):
        chapters.settings(chapter, "smoke", **override)


def test_unknown_names_and_profiles_are_refused():
    with pytest.raises(ValueError, match="unknown setting.*'lr'"):
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
