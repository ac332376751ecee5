"""Chapter 02: the architectures, measured rather than described (nothing trains: hooks on real models, norms on
real tokens, ``count_parameters`` and ``FlopCounterMode``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd
import torch
from einops.layers.torch import Rearrange
from torch import nn

from ... import data
from ...models import CARDS, NORMS, REFERENCE_VIT, VIT_FAMILY, BatchNorm, build_model, count_parameters
from ...models.norms import check_choice
from ...publishing import figures
from ...publishing.results import ChapterResult
from .settings import ModelsSettings
from .sizes import model_sizes


def _describe(module: nn.Module) -> str:
    if isinstance(module, tuple(NORMS.values())):  # any registered norm: its class and its number of features
        return f"{type(module).__name__}({module.weight.shape[0]})"
    if isinstance(module, nn.Linear):
        return f"Linear({module.in_features}→{module.out_features})"
    if isinstance(module, Rearrange):
        return "Rearrange"
    return type(module).__name__


def shape_walkthrough(model_name: str, batch_size: int = 2, depth: int | None = None) -> pd.DataFrame:
    """Every stage of a ViT-family model on a batch of MNIST-sized images: module, output shape (read by forward
    hooks from a real eval-mode pass) and parameters."""
    check_choice("model_name", model_name, VIT_FAMILY)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; it must be an integer >= 1")
    model = build_model(model_name, **({} if depth is None else {"depth": depth})).eval()
    blocks, embed = model.transformer.layers, model.to_patch_embedding
    norm, head = model.transformer.norm, model.mlp_head
    attn, ffn = blocks[0]
    shapes: dict[nn.Module, tuple] = {}  # each watched module's (input shape, output shape)
    hook = lambda module, inputs, output: shapes.__setitem__(module, (tuple(inputs[0].shape), tuple(output.shape)))
    watched = [*list(embed)[:4], model.transformer, attn, ffn.net[2], ffn, norm, head]
    handles = [module.register_forward_hook(hook) for module in watched]
    images = torch.rand(batch_size, REFERENCE_VIT["channels"], REFERENCE_VIT["image_size"], REFERENCE_VIT["image_size"])
    with torch.no_grad():
        model(images)
    for handle in handles:
        handle.remove()
    into, out = (lambda module: shapes[module][0]), (lambda module: shapes[module][1])

    depth_ = len(blocks)
    stages = ("cut into 7×7 patches, flattened", "normalise each patch vector", "project patches to tokens")
    rows = [("input images", "", tuple(images.shape), 0)]
    rows += [
        (stage, _describe(embed[i]), out(embed[i]), count_parameters(embed[i]))
        for i, stage in enumerate((*stages, "normalise the tokens"))
    ]
    learnt = model.pos_embedding.numel() if isinstance(model.pos_embedding, nn.Parameter) else 0
    cls = model.cls_token.numel() + learnt
    mhsa = f"{_describe(attn.norm)} → Attention({attn.heads} heads)"
    hidden = " → ".join(_describe(m) for m in list(ffn.net)[:3])
    rows += [
        ("prepend CLS token, add positional embedding", "cls_token, pos_embedding", into(model.transformer), cls),
        ("block 1: x + MHSA(norm(x))", mhsa, out(attn), count_parameters(attn)),
        ("block 1: inside the FFN, its hidden layer", hidden, out(ffn.net[2]), 0),
        ("block 1: x + FFN(x)", "FeedForward", out(ffn), count_parameters(ffn)),
    ]
    if depth_ > 1:
        rest = sum(count_parameters(block) for block in list(blocks)[1:])
        rows.append((f"blocks 2–{depth_} (same shapes)", f"{depth_ - 1} × block", into(norm), rest))
    pool = f"pool: take the {'CLS token' if model.pool == 'cls' else 'token mean'}"
    rows += [
        ("final norm", _describe(norm), out(norm), count_parameters(norm)),
        (pool, f"pool={model.pool!r}", into(head), 0),
        ("classification head (logits)", _describe(head), out(head), count_parameters(head)),
    ]
    table = pd.DataFrame(rows, columns=["stage", "module", "output shape", "parameters"])
    table["output shape"] = table["output shape"].map(lambda s: "(" + ", ".join(map(str, s)) + ")")
    table.attrs["total_parameters"] = count_parameters(model)
    return table


def norm_sites() -> pd.DataFrame:
    """Which normalisation each ViT of the family uses at each place, read off the built models."""
    sites = {
        "patch embedding (before the Linear)": lambda m: _describe(m.to_patch_embedding[1]),
        "patch embedding (after the Linear)": lambda m: _describe(m.to_patch_embedding[3]),
        "attention pre-norm": lambda m: _describe(m.transformer.layers[0][0].norm),
        "feed-forward network": lambda m: " → ".join(
            _describe(layer) for layer in m.transformer.layers[0][1].net if not isinstance(layer, nn.Dropout)
        ),
        "final norm": lambda m: _describe(m.transformer.norm),
    }
    built = {name: build_model(name) for name in VIT_FAMILY}
    return pd.DataFrame(
        [{"place": place, **{name: read(model) for name, model in built.items()}} for place, read in sites.items()]
    )


def norm_axes_demo(x: torch.Tensor | None = None) -> pd.DataFrame:
    """LayerNorm (each token over its features) vs BatchNorm (each feature over batch and tokens, training mode) on
    one token batch: the largest |mean| and the range of the (biased) std of each output along both kinds of group."""
    if x is None:  # a small batch whose features have very different offsets and scales, as real activations do
        noise = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0))
        x = torch.linspace(-3, 3, 6) + torch.linspace(0.5, 4, 6) * noise
    if x.dim() != 3 or x.shape[0] < 2:
        raise ValueError(f"x of shape {tuple(x.shape)} is not allowed; give a (batch >= 2, tokens, features) tensor")
    b, n, d = x.shape
    outputs = {"LayerNorm": nn.LayerNorm(d)(x), "BatchNorm (train mode)": BatchNorm(d).train()(x)}
    rows = []
    for name, y in outputs.items():
        per_token = y.detach()  # groups: each (image, token), over the d features
        per_feature = per_token.reshape(b * n, d)  # groups: each feature, over the b*n (image, token) pairs
        rows.append(
            {
                "norm": name,
                "groups normalised": f"{b * n} tokens × {d} features each"
                if name == "LayerNorm"
                else f"{d} features × {b * n} (image, token) values each",
                "max |mean| per token (over features)": per_token.mean(dim=-1).abs().max().item(),
                "std per token (over features)": _range(per_token.std(dim=-1, unbiased=False)),
                "max |mean| per feature (over batch & tokens)": per_feature.mean(dim=0).abs().max().item(),
                "std per feature (over batch & tokens)": _range(per_feature.std(dim=0, unbiased=False)),
            }
        )
    table = pd.DataFrame(rows)
    table.attrs["shape"] = (b, n, d)
    return table


def _range(values: torch.Tensor) -> str:
    return f"{values.min().item():.3f} – {values.max().item():.3f}"


def batch_dependence(seed: int = 0) -> pd.DataFrame:
    """Whether a model's answer for one image depends on the rest of its batch: the largest difference of its logits
    between two batches, per untrained (seeded) model, in training and in eval mode."""
    images, _ = data.load_mnist(train=False)
    x = data.to_float(images[:201])
    target, first, second = x[:1], x[1:101], x[101:201]
    rows = []
    for name in VIT_FAMILY:
        torch.manual_seed(seed)
        model = build_model(name)
        row = {"model": name, "norms": CARDS[name].norms}
        for mode in ("train", "eval"):
            probe = copy.deepcopy(model).train(mode == "train")  # a train-mode pass moves the running stats
            with torch.no_grad():
                a = probe(torch.cat([target, first]))[0]
                b = probe(torch.cat([target, second]))[0]
            row[f"max |Δ logit| in {mode} mode"] = (a - b).abs().max().item()
        rows.append(row)
    return pd.DataFrame(rows)


def running_mean_trace(steps: int = 60, batch_size: int = 100, momentum: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """How the running mean of ViTBN's first norm (over the 49 pixels of each 7x7 patch) approaches the training-set
    mean, batch by batch: with momentum m the initial error shrinks as (1 - m)^k, the rest is noise."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} is not allowed; it must be an integer >= 1")
    images, _ = data.load_mnist(train=True)
    patchify = Rearrange("b c (h p1) (w p2) -> (b h w) (p1 p2 c)", p1=7, p2=7)
    # float64: a float32 mean's rounding depends on the thread count, and the figure must not
    true_mean = patchify(data.to_float(images).double()).mean(dim=0)
    norm = BatchNorm(49, momentum=momentum).double().train()
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    rows = [{"step": 0, "max |error|": (norm.running_mean - true_mean).abs().max().item()}]
    with torch.no_grad():
        for step in range(1, steps + 1):
            batch = data.to_float(images[order[(step - 1) * batch_size : step * batch_size]]).double()
            norm(patchify(batch))
            rows.append({"step": step, "max |error|": (norm.running_mean - true_mean).abs().max().item()})
    trace = pd.DataFrame(rows)
    trace["(1 − momentum)^step × initial error"] = trace["max |error|"].iloc[0] * (1 - momentum) ** trace["step"]
    trace.attrs.update(momentum=momentum, batch_size=batch_size)
    return trace


def running_stats_figure(result: ModelsResult):
    """The running-mean trace on a log scale, with the geometric envelope it should follow."""
    trace = result.trace
    figures.use_style()
    fig, ax = plt.subplots(figsize=(7, 4))
    measured, envelope = trace["max |error|"], trace["(1 − momentum)^step × initial error"]
    label = "BatchNorm running mean (measured)"
    ax.plot(trace["step"], measured, marker="o", markersize=3, color=figures.color("ViTBN"), label=label)
    label = f"(1 − {trace.attrs.get('momentum', 0.1):g})^step × initial error"
    ax.plot(trace["step"], envelope, linestyle="--", color="0.4", label=label)
    ax.set_yscale("log")
    ax.set(
        xlabel=f"training step (batch of {trace.attrs.get('batch_size', 100)} images)",
        ylabel="max |running mean − data mean| (pixel value)",
        title="Running mean of the patch-pixel BatchNorm converges to the data mean",
    )
    ax.legend()
    caption = (
        "Largest error of BatchNorm's running mean (49 patch pixels of MNIST training batches) against the "
        "training-set mean, per step; no model is trained."
    )
    about = dict(reproduces="new/running_stats", caption=caption, reads="MNIST training batches")
    return figures.save_figure(fig, "02_running_stats", result, data=trace, **about)


@dataclass(frozen=True)
class ModelsResult(ChapterResult):
    """Chapter 02's measurements: the running-mean trace and every configuration's size (nothing is trained)."""

    settings: ModelsSettings
    trace: pd.DataFrame
    sizes: pd.DataFrame


def plan(settings: ModelsSettings) -> list:
    return []  # chapter 02 trains nothing


def run(settings: ModelsSettings, force: bool = False) -> ModelsResult:
    """Measure the running-mean trace and the size of every configuration (``force`` changes nothing)."""
    return ModelsResult(settings, running_mean_trace(), model_sizes())
