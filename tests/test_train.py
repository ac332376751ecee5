"""``python -m vitbn_nb train``: a chapter's runs trained without papermill, its plan listed without training."""

from vitbn_nb import runs
from vitbn_nb.__main__ import main


def test_dry_run_lists_every_chapter_and_trains_nothing(run_store, capsys):
    assert main(["train", "--dry-run", "--profile", "paper"]) == 0
    printed = capsys.readouterr().out
    assert "nothing is trained" in printed and "03_fixed_lr" in printed and "07_three_things" in printed
    assert not run_store.exists() or not any(run_store.iterdir())


def test_training_a_chapter_stores_its_plan_and_a_second_call_trains_nothing(run_store, mnist_ready, capsys):
    assert main(["train", "--profile", "smoke", "--chapters", "1"]) == 0
    stored = {folder.name: runs.Run(folder).record for folder in run_store.iterdir() if not folder.name.startswith(".")}
    assert len(stored) == 4 and all(record["status"] == "finished" for record in stored.values())
    assert main(["train", "--profile", "smoke", "--chapters", "01_batchnorm_intro"]) == 0
    again = {folder.name: runs.Run(folder).record for folder in run_store.iterdir() if not folder.name.startswith(".")}
    assert again == stored


def test_an_unknown_chapter_is_refused_by_name(capsys):
    assert main(["train", "--chapters", "99"]) == 1
    assert "'99' is not a chapter" in capsys.readouterr().err
