"""Checkpoint audit: which encoder blocks of a ViT ever trained. A block no step reached keeps its norms at their
initial values (a BatchNorm's ``num_batches_tracked`` at 0): how the reference repository's BatchNorm checkpoints show
their encoder's early return (``REFERENCE_FACTS.md``). Offline, ``recorded_reference_audit.json`` stands in."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import urllib.request
from collections import defaultdict
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from .. import atomic
from ..data import ImageSet, load_mnist
from ..engines import engine
from ..models import build_model

REFERENCE_REPOSITORY = "anindyahepth/BatchNorm_in_Transformers_CV"
#: The checkpoints REFERENCE_FACTS.md names, each pinned to a commit that holds it, with the size and git blob id
#: that commit's tree gives it (``git ls-tree -l <commit> model_pth_dir/``): a download is read up to that size and
#: kept only if it is that blob.
REFERENCE_CHECKPOINTS = {
    name: dict(commit=commit, path=f"model_pth_dir/{name}.pth", model=model, bytes=size, blob=blob)
    for name, commit, model, size, blob in (
        ("ViT_opt_30", "10c3799dc85f6875b15ebb915ea1ffe55b2f287f", "ViT", 3602612,
         "bab5914dd83ddcc329c5e16c47adba4e742f1593"),
        ("ViTBNFFN_opt_30", "a84dfedf986302bc59b5c8be357ef94ea3042e33", "ViTBNFFN", 3655990,
         "4bbb1cb334fd71fd3d6e7441b536fdb442a80739"),
        ("FinOptAug1_ViT_30", "8ae6225fc5eea038597a1cccbe27b460190cdfbf", "ViT", 3603104,
         "3436cbadeeca15589343e6e883497600ba4edbfb"),
        ("FinOptAug1_ViTBNFFN_30", "8ae6225fc5eea038597a1cccbe27b460190cdfbf", "ViTBNFFN", 3656796,
         "aac921f9bd30440db15dc9392616af1bcf6d7a40"),
        ("FinOptAug1_ViTBN_30", "6770a6c55893747bcafe11c627f00bb79996a2ac", "ViTBN", 3670572,
         "9b4e042c0228d9c138791ef072250656f9d12ad9"),
        ("VITBNFFN_d5_15", "8125e17fb12865c2a419a4c5bb1c62b893307945", "ViTBNFFN", 3018554,
         "27a7ddf933f57fab5b2122aa0c4528465d255fe1"),
    )
}  # fmt: skip
RECORDED = Path(__file__).with_name("recorded_reference_audit.json")
_BLOCK = re.compile(r"^(?:.*\.)?transformer\.layers\.(\d+)\.(.+)$")


def _state_dict(checkpoint) -> dict[str, torch.Tensor]:
    """A state dict from a path or a dict (also one that wraps it under ``model`` or ``state_dict``)."""
    if isinstance(checkpoint, (str, Path)):
        path = Path(checkpoint)
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {path} does not exist")
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise ValueError(f"checkpoint {path} could not be read as a PyTorch state dict: {error}") from error
    if isinstance(checkpoint, nn.Module):
        checkpoint = checkpoint.state_dict()
    for key in ("model", "state_dict"):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
    if not isinstance(checkpoint, dict) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        raise ValueError("checkpoint is not a state dict (a mapping of names to tensors)")
    return checkpoint


def _norm_modules(block: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """The norms of one block, by module name: modules with BatchNorm buffers or a 1-D ``weight``."""
    modules: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for name, tensor in block.items():
        module, _, leaf = name.rpartition(".")
        modules[module][leaf] = tensor
    return {
        name: leaves
        for name, leaves in modules.items()
        if "running_mean" in leaves or ("weight" in leaves and leaves["weight"].dim() == 1)
    }


def block_usage(checkpoint) -> pd.DataFrame:
    """One row per encoder block: its norms, whether they hold their initial values, its BatchNorm step counter, and
    a verdict. ``checkpoint``: a path, a state dict (optionally under ``model`` / ``state_dict``) or a module."""
    state = _state_dict(checkpoint)
    blocks: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)
    for name, tensor in state.items():
        if match := _BLOCK.match(name):
            blocks[int(match.group(1))][match.group(2)] = tensor
    if not blocks:
        raise ValueError(
            "checkpoint has no encoder blocks: no key of the form 'transformer.layers.<i>.…' "
            f"(its first keys: {list(state)[:5]})"
        )
    rows = []
    for index in sorted(blocks):
        norms = _norm_modules(blocks[index])
        at_initial = [
            bool(torch.all(leaves["weight"] == 1)) and bool(torch.all(leaves.get("bias", torch.zeros(1)) == 0))
            for leaves in norms.values()
            if "weight" in leaves
        ]
        counters = [int(leaves["num_batches_tracked"]) for leaves in norms.values() if "num_batches_tracked" in leaves]
        untouched = bool(at_initial) and all(at_initial) and all(count == 0 for count in counters)
        verdict = ("never trained" if untouched else "trained") if norms else "unknown (no norm in this block)"
        rows.append(
            {
                "block": index + 1,
                "norms": len(norms),
                "BatchNorms": len(counters),
                "norms at initial values": f"{sum(at_initial)}/{len(at_initial)}",
                "num_batches_tracked": max(counters) if counters else pd.NA,
                "verdict": verdict,
            }
        )
    frame = pd.DataFrame(rows)
    frame["num_batches_tracked"] = frame["num_batches_tracked"].astype("Int64")
    return frame


# -- the reference repository's checkpoints ---------------------------------------------------
def reference_url(name: str) -> str:
    """The raw download address of a named reference checkpoint, pinned to its commit."""
    if name not in REFERENCE_CHECKPOINTS:
        raise ValueError(f"name={name!r} is not allowed; choose one of {', '.join(REFERENCE_CHECKPOINTS)}")
    entry = REFERENCE_CHECKPOINTS[name]
    return f"https://raw.githubusercontent.com/{REFERENCE_REPOSITORY}/{entry['commit']}/{entry['path']}"


def blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (its blob's sha1)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def download_reference_checkpoint(name: str, folder, timeout: float = 30.0) -> Path:
    """Download one reference checkpoint into ``folder`` (kept out of git: GPL-3.0 weights are never committed): read
    no more than its pinned size, kept only if it is its pinned blob (a copy already there is checked alike)."""
    url, entry = reference_url(name), REFERENCE_CHECKPOINTS[name]
    target = Path(folder) / f"{name}.pth"
    if target.is_file() and target.stat().st_size == entry["bytes"] and blob_id(target.read_bytes()) == entry["blob"]:
        return target
    data = b""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # one byte past the pin tells a larger body
        while len(data) <= entry["bytes"] and (chunk := response.read(entry["bytes"] + 1 - len(data))):
            data += chunk
    if len(data) != entry["bytes"] or blob_id(data) != entry["blob"]:
        size = f"more than {entry['bytes']:,}" if len(data) > entry["bytes"] else f"{len(data):,}"
        raise ValueError(
            f"{url} sent {size} bytes that are not the pinned checkpoint (git blob {entry['blob'][:10]}, "
            f"{entry['bytes']:,} bytes); nothing was kept"
        )
    atomic.write_bytes(target, data)
    return target


def internet_reachable(timeout: float = 3.0) -> bool:
    try:
        urllib.request.urlopen(f"https://github.com/{REFERENCE_REPOSITORY}", timeout=timeout).close()
        return True
    except Exception:
        return False


#: The reference repository's BatchNorm classes name their modules in their own way; these rules rename a
#: state dict to the einops-style names the book's models (and the reference ViT checkpoints) use.
_RENAMES = (
    (re.compile(r"(transformer\.layers\.\d+)\.1\.(?:norm\.BN|BN)\."), r"\1.1.net.1."),
    (re.compile(r"\.BN\."), "."),
    (re.compile(r"\.1\.Lin1\."), ".1.net.0."),
    (re.compile(r"\.1\.Lin2\."), ".1.net.4."),
    (re.compile(r"\.0\.patch_emb\."), ".0.to_qkv."),
    (re.compile(r"\.0\.out_proj\."), ".0.to_out."),
    (re.compile(r"^pos_embedding_random$"), "pos_embedding"),
    (re.compile(r"^linear_head\."), "mlp_head."),
)


def load_reference_into_book_model(checkpoint, model: str, depth: int, **model_kwargs) -> nn.Module:
    """The book's ``model`` at ``depth`` with a reference checkpoint's first ``depth`` blocks (and all outside the
    encoder) loaded: ``depth=1`` gives the article-era BatchNorm models that actually ran."""
    # under the book's parameter names (names already in that layout pass unchanged)
    rename = lambda name: functools.reduce(lambda n, rule: rule[0].sub(rule[1], n), _RENAMES, name)
    state = {rename(name): t for name, t in _state_dict(checkpoint).items()}
    kept = {name: t for name, t in state.items() if not ((m := _BLOCK.match(name)) and int(m.group(1)) >= depth)}
    qkv_bias = any(name.endswith("to_qkv.bias") for name in kept)
    book = build_model(model, **{**model_kwargs, "depth": depth, "qkv_bias": qkv_bias})
    try:
        book.load_state_dict(kept)
    except RuntimeError as error:
        raise ValueError(f"checkpoint does not fit the book's {model} at depth {depth}: {error}") from error
    return book.eval()


def mnist_accuracy(model: nn.Module) -> float:
    """Accuracy (%) on the 10,000 MNIST test images, scaled as ToTensor scales: the engine's test pass."""
    return engine.evaluate(model, ImageSet(*load_mnist(train=False)), device=torch.device("cpu"))["test_acc"]


def recorded_audit() -> dict:
    """The audit and scores recorded from the reference checkpoints (see the file's ``source``)."""
    return json.loads(RECORDED.read_text())


#: What REFERENCE_FACTS.md says the reference checkpoints score on MNIST's test set with the author's classes.
EXPECTED_SCORES = {
    ("FinOptAug1_ViT_30", 6): 99.15,
    ("FinOptAug1_ViTBNFFN_30", 1): 95.12,
    ("FinOptAug1_ViTBNFFN_30", 6): 92.00,
    ("FinOptAug1_ViTBN_30", 1): 95.46,
}


@dataclasses.dataclass(frozen=True)
class ReferenceAudit:
    """The audit of the reference checkpoints: per-block verdicts, MNIST scores, and where they come from."""

    blocks: pd.DataFrame
    scores: pd.DataFrame
    source: str
    live: bool

    def summary(self) -> pd.DataFrame:
        """One row per checkpoint: its commit, blocks, which trained, and its block-1 / later counters."""
        rows = []
        for name, group in self.blocks.groupby("checkpoint", sort=False):
            never = group.loc[group["verdict"] == "never trained", "block"].tolist()
            counters, later = group["num_batches_tracked"], group["num_batches_tracked"].iloc[1:]
            steps_later = "—" if later.isna().all() else ", ".join(str(int(c)) for c in later.unique())
            rows.append(
                {
                    "checkpoint": name,
                    "commit": group["commit"].iloc[0][:7],
                    "model": group["model"].iloc[0],
                    "blocks": len(group),
                    "trained": int((group["verdict"] == "trained").sum()),
                    "never trained": ", ".join(map(str, never)) or "none",
                    "BatchNorm steps, block 1": counters.iloc[0],
                    "BatchNorm steps, blocks 2+": steps_later,
                }
            )
        return pd.DataFrame(rows)


def _audit_rows(name: str, frame: pd.DataFrame, entry: dict | None = None) -> pd.DataFrame:
    entry = entry or REFERENCE_CHECKPOINTS[name]
    return frame.assign(checkpoint=name, commit=entry["commit"], model=entry["model"])[
        ["checkpoint", "commit", "model", *frame.columns]
    ]


def _score_rows(paths: dict[str, Path]) -> pd.DataFrame:
    rows = []
    for (name, depth), expected in EXPECTED_SCORES.items():
        if name in paths:
            model = REFERENCE_CHECKPOINTS[name]["model"]
            accuracy = mnist_accuracy(load_reference_into_book_model(paths[name], model, depth))
            rows.append((name, model, depth, round(accuracy, 2), expected))
    columns = ["checkpoint", "model", "blocks loaded", "MNIST test accuracy (%)", "REFERENCE_FACTS.md (%)"]
    return pd.DataFrame(rows, columns=columns)


def audit_folder(folder) -> ReferenceAudit:
    """Audit and score every named reference checkpoint found in ``folder`` (as ``<name>.pth``)."""
    paths = {name: Path(folder) / f"{name}.pth" for name in REFERENCE_CHECKPOINTS}
    paths = {name: path for name, path in paths.items() if path.is_file()}
    if not paths:
        raise FileNotFoundError(
            f"{folder} holds none of the reference checkpoints ({', '.join(n + '.pth' for n in REFERENCE_CHECKPOINTS)})"
        )
    blocks = pd.concat([_audit_rows(name, block_usage(path)) for name, path in paths.items()], ignore_index=True)
    return ReferenceAudit(blocks, _score_rows(paths), f"checkpoints in {folder}", live=True)


def reference_audit(live: bool | None = None, folder=None) -> ReferenceAudit:
    """The reference checkpoints audited live where the internet is reachable, else the recorded audit."""
    if live is None:
        live = internet_reachable()
    if live:
        folder = Path(folder) if folder is not None else Path.home() / ".cache" / "vitbn_nb" / "reference"
        for name in REFERENCE_CHECKPOINTS:
            download_reference_checkpoint(name, folder)
        source = f"live: downloaded from github.com/{REFERENCE_REPOSITORY} at the pinned commits into {folder}"
        return dataclasses.replace(audit_folder(folder), source=source)
    record = recorded_audit()
    blocks = pd.concat(
        [_audit_rows(name, pd.DataFrame(entry["blocks"]), entry) for name, entry in record["checkpoints"].items()],
        ignore_index=True,
    )
    blocks["num_batches_tracked"] = blocks["num_batches_tracked"].astype("Int64")
    source = f"recorded ({record['recorded']}, {record['how']}); no internet here to check it live"
    return ReferenceAudit(blocks, pd.DataFrame(record["scores"]), source, live=False)
