"""vitbn_nb.judging.audit: which encoder blocks of a checkpoint ever trained, and the reference checkpoints' record."""

import io
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitbn_nb.judging import audit
from vitbn_nb.models import build_model

SMALL = dict(image_size=8, patch_size=4, dim=16, heads=2, dim_head=8, mlp_dim=32)


def train_steps(model: nn.Module, steps: int, blocks_used: int | None = None) -> nn.Module:
    """A few Adam steps; with ``blocks_used`` the encoder runs only its first blocks (the reference code's bug)."""
    torch.manual_seed(0)
    layers = model.transformer.layers
    if blocks_used is not None:
        model.transformer.layers = nn.ModuleList(list(layers)[:blocks_used])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        x, y = torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.transformer.layers = layers
    return model


@pytest.mark.parametrize("name", ["ViTBNFFN", "ViTBN"])
def test_blocks_a_bypassed_forward_never_reached_are_never_trained(name):
    model = train_steps(build_model(name, depth=4, **SMALL), steps=5, blocks_used=1)
    frame = audit.block_usage(model.state_dict())
    assert frame["block"].tolist() == [1, 2, 3, 4]
    assert frame["verdict"].tolist() == ["trained", "never trained", "never trained", "never trained"]
    assert frame["num_batches_tracked"].tolist() == [5, 0, 0, 0]
    assert frame.loc[0, "norms at initial values"] == "0/2"
    assert frame.loc[1:, "norms at initial values"].eq("2/2").all()


def test_a_layernorm_vit_is_judged_by_its_norm_parameters():
    model = train_steps(build_model("ViT", depth=3, **SMALL), steps=3, blocks_used=2)
    frame = audit.block_usage(model)
    assert frame["verdict"].tolist() == ["trained", "trained", "never trained"]
    assert frame["num_batches_tracked"].isna().all() and frame["BatchNorms"].eq(0).all()


def test_every_block_of_a_fully_trained_model_is_trained(tmp_path):
    model = train_steps(build_model("ViTBN", depth=3, **SMALL), steps=2)
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "optimizer": {}}, path)  # a checkpoint that wraps the weights
    frame = audit.block_usage(path)
    assert frame["verdict"].eq("trained").all() and frame["num_batches_tracked"].tolist() == [2, 2, 2]


def test_an_untrained_model_is_never_trained_everywhere():
    frame = audit.block_usage(build_model("ViTBNFFN", depth=2, **SMALL).state_dict())
    assert frame["verdict"].eq("never trained").all()


def test_parallel_branches_count_towards_their_block():
    model = train_steps(build_model("ViTBNFFN", depth=2, branches=2, **SMALL), steps=2, blocks_used=1)
    frame = audit.block_usage(model)
    assert frame["norms"].tolist() == [4, 4] and frame["verdict"].tolist() == ["trained", "never trained"]


def reference_layout(state: dict, model: str) -> dict:
    """The book's names turned into the reference repository's BatchNorm classes' names (the inverse rules)."""
    out = {}
    for name, tensor in state.items():
        name = re.sub(r"^pos_embedding$", "pos_embedding_random", name)
        name = re.sub(r"^mlp_head\.", "linear_head.", name)
        name = re.sub(r"\.0\.to_qkv\.", ".0.patch_emb.", name)
        name = re.sub(r"\.0\.to_out\.", ".0.out_proj.", name)
        name = re.sub(r"\.1\.net\.0\.", ".1.Lin1.", name)
        name = re.sub(r"\.1\.net\.4\.", ".1.Lin2.", name)
        name = re.sub(r"\.1\.net\.1\.", ".1.norm.BN." if model == "ViTBN" else ".1.BN.", name)
        if model == "ViTBN":
            name = re.sub(r"(to_patch_embedding\.[13]|\.0\.norm|transformer\.norm)\.", r"\1.BN.", name)
        out[name] = tensor
    return out


@pytest.mark.parametrize("name", ["ViTBNFFN", "ViTBN"])
def test_reference_layouts_are_audited_and_load_into_the_book_models(name):
    trained = train_steps(build_model(name, depth=3, qkv_bias=True, **SMALL), steps=3, blocks_used=1)
    state = reference_layout(trained.state_dict(), name)
    assert any(".BN." in key for key in state) and any("patch_emb" in key for key in state)
    frame = audit.block_usage(state)
    assert frame["verdict"].tolist() == ["trained", "never trained", "never trained"]
    # the book's model of depth 1 with the reference's first block computes what the trained model's first block did
    book = audit.load_reference_into_book_model(state, name, depth=1, **SMALL).eval()
    trained.eval().transformer.layers = nn.ModuleList(list(trained.transformer.layers)[:1])
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(book(x), trained(x))


def test_load_reference_refuses_a_checkpoint_of_another_shape():
    state = build_model("ViT", depth=2, **SMALL).state_dict()
    with pytest.raises(ValueError, match="does not fit the book's ViTBN"):
        audit.load_reference_into_book_model(state, "ViTBN", depth=1)


def test_bad_checkpoints_get_errors_that_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        audit.block_usage(tmp_path / "missing.pt")
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="broken.pt"):
        audit.block_usage(broken)
    with pytest.raises(ValueError, match="no encoder blocks"):
        audit.block_usage({"net.0.weight": torch.ones(3, 3)})
    with pytest.raises(ValueError, match="not a state dict"):
        audit.block_usage({"epochs": [1, 2]})


def test_the_recorded_reference_audit_is_what_reference_facts_states():
    result = audit.reference_audit(live=False)
    assert not result.live and result.source.startswith("recorded")
    summary = result.summary().set_index("checkpoint")
    # REFERENCE_FACTS.md: block 1 counted 18,000 / 90,000 / 33,360 steps, blocks 2-6 0; the post-fix d5 model 9,000 each
    for name, steps in (("ViTBNFFN_opt_30", 18000), ("FinOptAug1_ViTBNFFN_30", 90000), ("FinOptAug1_ViTBN_30", 33360)):
        assert summary.loc[name, "trained"] == 1 and summary.loc[name, "never trained"] == "2, 3, 4, 5, 6"
        assert summary.loc[name, "BatchNorm steps, block 1"] == steps
        assert summary.loc[name, "BatchNorm steps, blocks 2+"] == "0"
    assert (
        summary.loc["VITBNFFN_d5_15", "trained"] == 5
        and summary.loc["VITBNFFN_d5_15", "BatchNorm steps, blocks 2+"] == "9000"
    )
    assert summary.loc["ViT_opt_30", "trained"] == 6 and summary.loc["FinOptAug1_ViT_30", "trained"] == 6
    for name, entry in audit.recorded_audit()["checkpoints"].items():
        assert entry["commit"] == audit.REFERENCE_CHECKPOINTS[name]["commit"] and len(entry["commit"]) == 40
    scores = result.scores.set_index(["checkpoint", "blocks loaded"])
    for (name, depth), expected in audit.EXPECTED_SCORES.items():
        assert scores.loc[(name, depth), "MNIST test accuracy (%)"] == pytest.approx(expected, abs=0.01)


def test_reference_downloads_are_pinned_to_commits():
    url = audit.reference_url("FinOptAug1_ViTBN_30")
    assert audit.REFERENCE_CHECKPOINTS["FinOptAug1_ViTBN_30"]["commit"] in url and url.endswith(".pth")
    with pytest.raises(ValueError, match="ViT_best"):
        audit.reference_url("ViT_best")


class _Response(io.BytesIO):
    """What ``urlopen`` hands back (a context manager that reads like a file), counting the bytes it hands out."""

    def __init__(self, body: bytes, handed: list):
        super().__init__(body)
        self.handed = handed

    def read(self, n: int = -1) -> bytes:
        chunk = super().read(n)
        self.handed.append(len(chunk))
        return chunk


def test_a_reference_download_reads_no_more_than_its_pinned_size_and_keeps_only_the_pinned_blob(tmp_path, monkeypatch):
    """A download is read up to the checkpoint's pinned size (one byte more tells a larger body) and kept only if it is
    the pinned git blob; anything else is refused by name and nothing is written. The pins are those git computes."""
    name = "VITBNFFN_d5_15"
    pinned = audit.REFERENCE_CHECKPOINTS[name]
    genuine = b"\x07" * 64
    assert audit.blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's id of an empty file
    monkeypatch.setitem(audit.REFERENCE_CHECKPOINTS, name, {**pinned, "bytes": 64, "blob": audit.blob_id(genuine)})
    for body, said, read in ((b"\x07" * 10**6, "more than 64 bytes", 65), (b"\x08" * 64, "64 bytes that are not", 64)):
        handed: list = []
        monkeypatch.setattr(audit.urllib.request, "urlopen", lambda url, timeout, b=body, h=handed: _Response(b, h))
        with pytest.raises(ValueError, match=said):
            audit.download_reference_checkpoint(name, tmp_path)
        assert sum(handed) == read and not list(tmp_path.iterdir())
    asked: list = []
    monkeypatch.setattr(audit.urllib.request, "urlopen", lambda url, timeout: _Response(genuine, asked))
    path = audit.download_reference_checkpoint(name, tmp_path)
    assert path.read_bytes() == genuine and [p.name for p in tmp_path.iterdir()] == [f"{name}.pth"]
    monkeypatch.setattr(audit.urllib.request, "urlopen", lambda *a, **k: pytest.fail("the kept copy is the blob"))
    assert audit.download_reference_checkpoint(name, tmp_path) == path
    path.write_bytes(b"\x08" * 64)  # a copy changed since: fetched again
    monkeypatch.setattr(audit.urllib.request, "urlopen", lambda url, timeout: _Response(genuine, asked))
    assert audit.download_reference_checkpoint(name, tmp_path).read_bytes() == genuine
