"""Operations per training step and inference pass (chapter 08): machine-independent counts, checked on small
models and on the structure they must have (every block adds the same operations; a view is not counted)."""

import pytest
import torch
from torch import nn

from vitbn_nb.bench import op_counts
from vitbn_nb.models import build_model


def test_a_view_is_not_an_operation_and_a_product_is():
    x = torch.rand(4, 6)
    counted = op_counts.dispatched(lambda: (x.view(6, 4).t() @ x.t()).sum())
    assert counted == {"mm": 1, "sum": 1}


def test_every_block_adds_the_same_operations_and_the_batch_size_changes_nothing():
    for name in ("ViT", "ViTBNFFN", "ViTBN"):
        counts = [op_counts.count(build_model(name, depth=d), 4) for d in (1, 2, 3)]
        for key in ("train_forward_backward_ops", "inference_ops", "inference_ops_folded"):
            assert counts[2][key] - counts[1][key] == counts[1][key] - counts[0][key] > 0, (name, key)
        assert op_counts.count(build_model(name, depth=2), 16) == counts[1]


def test_training_dispatches_more_than_inference_and_adam_runs_a_fixed_number_of_multi_tensor_updates():
    small, deep = (op_counts.count(build_model("ViTBN", depth=d), 4) for d in (1, 4))
    assert small["train_step_ops"] > 2 * small["inference_ops"]
    assert small["train_optimizer_ops"] == deep["train_optimizer_ops"]  # foreach: not one update per parameter
    assert small["train_step_ops"] == small["train_forward_backward_ops"] + small["train_optimizer_ops"]


def test_batchnorm_costs_operations_in_training_none_in_eval_and_folding_removes_some():
    vit, bn = (op_counts.count(build_model(name, depth=2), 4) for name in ("ViT", "ViTBN"))
    assert bn["train_forward_backward_ops"] > vit["train_forward_backward_ops"]  # batch statistics and their grads
    assert bn["inference_ops"] == vit["inference_ops"]  # one normalisation operation each, either kind
    assert bn["inference_ops_folded"] < bn["inference_ops"] and vit["inference_ops_folded"] == vit["inference_ops"]


def test_a_flatten_is_a_view_so_a_linear_model_dispatches_one_operation():
    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(784, 10)

        def forward(self, x):
            return self.head(x.flatten(1))

    counted = op_counts.count(Flat(), 4)
    assert counted["inference_ops"] == 1  # addmm; flatten is a view


def test_the_flops_grow_exactly_with_the_batch_so_the_table_counts_on_a_small_one():
    from vitbn_nb.bench.measurements import inference_flops, training_flops

    cpu = torch.device("cpu")
    for name in ("ViT", "ViTBNFFN", "ViTBN", "ViTDyT"):
        model = build_model(name, depth=2)
        assert training_flops(model, 10, cpu) == 5 * training_flops(model, 2, cpu), name
        assert inference_flops(model, 10, cpu) == 5 * inference_flops(model, 2, cpu), name
    (row,) = op_counts.table(["ViTBN"], [2], 10)
    assert row["train_step_flops"] == training_flops(build_model("ViTBN", depth=2), 10, cpu)


def test_a_kept_table_is_read_back_only_while_the_code_and_the_settings_it_counted_are_the_same(tmp_path, monkeypatch):
    staging, published = tmp_path / "staging", tmp_path / "figures"
    counted = op_counts.kept_table(["ViT"], [1], 4, [staging, published])
    assert counted == op_counts.table(["ViT"], [1], 4)
    assert (staging / op_counts.COUNTS_FILE).exists() and not published.exists()

    def no_counting(*_args):
        raise AssertionError("counted again")

    monkeypatch.setattr(op_counts, "table", no_counting)
    assert op_counts.kept_table(["ViT"], [1], 4, [tmp_path / "elsewhere", staging]) == counted  # a later folder
    with pytest.raises(AssertionError, match="counted again"):
        op_counts.kept_table(["ViT"], [1, 2], 4, [staging])  # another depth
    monkeypatch.setattr(op_counts, "code_digest", lambda: "changed")
    with pytest.raises(AssertionError, match="counted again"):
        op_counts.kept_table(["ViT"], [1], 4, [staging])  # the models' code changed
    (staging / op_counts.COUNTS_FILE).write_text("{not json")
    with pytest.raises(AssertionError, match="counted again"):
        op_counts.kept_table(["ViT"], [1], 4, [staging])
