"""Chapter 02: the architectures, measured rather than described.

Nothing here trains. Shapes come from forward hooks on the real models, norms are
compared on a real token batch, the running statistics on real MNIST patches, and the
size table counts parameters with ``count_parameters`` and forward FLOPs with PyTorch's
``FlopCounterMode``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from einops.layers.torch import Rearrange
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from .. import data, figures
from ..models import AS_RUN_DEPTH, MODELS, REFERENCE_VIT, VIT_FAMILY, BatchNorm, build_model, count_parameters
from ..models.norms import check_choice
from ..profiles import ModelsSettings

CHAPTER = "02_models"
DEPTHS = tuple(range(1, 8))
EQUAL_DEPTHS = (1, 6)
TRANSFER_DEPTH = 6


class Notes(list):
    """Lines of computed text; a notebook shows them as a bulleted list."""

    def _repr_markdown_(self) -> str:
        return "\n".join(f"- {line}" for line in self)


def _describe(module: nn.Module) -> str:
    if isinstance(module, BatchNorm):
        return f"BatchNorm({module.num_features})"
    if isinstance(module, nn.LayerNorm):
        return f"LayerNorm({module.normalized_shape[0]})"
    if isinstance(module, nn.Linear):
        return f"Linear({module.in_features}→{module.out_features})"
    if isinstance(module, Rearrange):
        return "Rearrange"
    return type(module).__name__


def _params(module: nn.Module | None) -> int:
    return 0 if module is None else count_parameters(module)


def shape_walkthrough(model_name: str, batch_size: int = 2, depth: int | None = None) -> pd.DataFrame:
    """Every stage of a ViT-family model on a batch of MNIST-sized images: module, output shape, parameters.

    The shapes are read by forward hooks from a real forward pass (eval mode), not written down.
    """
    check_choice("model_name", model_name, VIT_FAMILY)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; it must be an integer >= 1")
    model = build_model(model_name, **({} if depth is None else {"depth": depth})).eval()
    blocks = model.transformer.layers
    seen: dict[str, tuple] = {}

    def remember(key, use_input=False):
        def hook(module, inputs, output):
            seen[key] = tuple((inputs[0] if use_input else output).shape)

        return hook

    embed = model.to_patch_embedding
    attn, ffn = blocks[0]
    hooks = [(embed[i], f"embed{i}", False) for i in range(4)]
    hooks += [
        (model.transformer, "tokens", True),
        (attn, "attn", False),
        (ffn.net[2], "ffn_hidden", False),
        (ffn, "ffn", False),
        (model.transformer.norm, "encoded", True),
        (model.transformer.norm, "final", False),
        (model.mlp_head, "pooled", True),
        (model.mlp_head, "logits", False),
    ]
    handles = []
    for module, key, use_input in hooks:
        handles.append(module.register_forward_hook(remember(key, use_input)))
    images = torch.rand(batch_size, REFERENCE_VIT["channels"], REFERENCE_VIT["image_size"], REFERENCE_VIT["image_size"])
    with torch.no_grad():
        model(images)
    for handle in handles:
        handle.remove()

    depth_ = len(blocks)
    rows = [
        ("input images", "", tuple(images.shape), 0),
        ("cut into 7×7 patches, flattened", _describe(embed[0]), seen["embed0"], 0),
        ("normalise each patch vector", _describe(embed[1]), seen["embed1"], _params(embed[1])),
        ("project patches to tokens", _describe(embed[2]), seen["embed2"], _params(embed[2])),
        ("normalise the tokens", _describe(embed[3]), seen["embed3"], _params(embed[3])),
        (
            "prepend CLS token, add positional embedding",
            "cls_token, pos_embedding",
            seen["tokens"],
            model.cls_token.numel()
            + (model.pos_embedding.numel() if isinstance(model.pos_embedding, nn.Parameter) else 0),
        ),
        (
            "block 1: x + MHSA(norm(x))",
            f"{_describe(attn.norm)} → Attention({attn.heads} heads)",
            seen["attn"],
            _params(attn),
        ),
        (
            "block 1: inside the FFN, its hidden layer",
            " → ".join(_describe(m) for m in list(ffn.net)[:3]),
            seen["ffn_hidden"],
            0,
        ),
        ("block 1: x + FFN(x)", "FeedForward", seen["ffn"], _params(ffn)),
    ]
    if depth_ > 1:
        rows.append(
            (
                f"blocks 2–{depth_} (same shapes)",
                f"{depth_ - 1} × block",
                seen["encoded"],
                sum(_params(m) for block in list(blocks)[1:] for m in block),
            )
        )
    rows += [
        ("final norm", _describe(model.transformer.norm), seen["final"], _params(model.transformer.norm)),
        (
            f"pool: take the {'CLS token' if model.pool == 'cls' else 'token mean'}",
            f"pool={model.pool!r}",
            seen["pooled"],
            0,
        ),
        ("classification head (logits)", _describe(model.mlp_head), seen["logits"], _params(model.mlp_head)),
    ]
    table = pd.DataFrame(rows, columns=["stage", "module", "output shape", "parameters"])
    table["output shape"] = table["output shape"].map(lambda s: "(" + ", ".join(map(str, s)) + ")")
    table.attrs["total_parameters"] = count_parameters(model)
    return table


def norm_sites() -> pd.DataFrame:
    """Which normalisation each of the three ViTs uses at each place, read off the built models."""
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


def token_batch(batch_size: int = 4, tokens: int = 5, features: int = 6, seed: int = 0) -> torch.Tensor:
    """A small (b, n, d) batch whose features have very different offsets and scales, as real activations do."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.linspace(-3, 3, features)
    scales = torch.linspace(0.5, 4, features)
    return offsets + scales * torch.randn(batch_size, tokens, features, generator=generator)


def norm_axes_demo(x: torch.Tensor | None = None) -> pd.DataFrame:
    """LayerNorm vs BatchNorm on one token batch: over which axes each output is zero-mean and unit-variance.

    LayerNorm normalises each token over its features (b·n groups of d numbers); BatchNorm (the
    token form of the book, training mode) normalises each feature over the batch and the tokens
    (d groups of b·n numbers). The table gives the largest |mean| and the range of the standard
    deviation (biased, as the norms use) of each output along both kinds of group.
    """
    x = token_batch() if x is None else x
    if x.dim() != 3 or x.shape[0] < 2:
        raise ValueError(f"x of shape {tuple(x.shape)} is not allowed; give a (batch >= 2, tokens, features) tensor")
    b, n, d = x.shape
    outputs = {"LayerNorm": nn.LayerNorm(d)(x), "BatchNorm (train mode)": BatchNorm(d).train()(x)}
    rows = []
    for name, y in outputs.items():
        y = y.detach()
        per_token = y  # groups: each (image, token), over the d features
        per_feature = y.reshape(b * n, d)  # groups: each feature, over the b*n (image, token) pairs
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
    """Does a model's answer for one image depend on the other images of its batch?

    The same MNIST test image is sent in two batches whose other images differ; the table gives
    the largest difference between its two logit vectors, per model, in training mode (batch
    statistics) and eval mode (running statistics). Each model is untrained (seeded) and its
    running statistics are left as they were: this is about the mechanism, not accuracy.
    """
    images, _ = data.load_mnist(train=False)
    x = data.to_float(images[:201])
    target, first, second = x[:1], x[1:101], x[101:201]
    rows = []
    for name in VIT_FAMILY:
        torch.manual_seed(seed)
        model = build_model(name)
        row = {
            "model": name,
            "norms": "LayerNorm only"
            if name == "ViT"
            else ("BatchNorm in the FFN" if name == "ViTBNFFN" else "BatchNorm everywhere"),
        }
        for mode in ("train", "eval"):
            probe = copy.deepcopy(model).train(mode == "train")  # a train-mode pass moves the running stats
            with torch.no_grad():
                a = probe(torch.cat([target, first]))[0]
                b = probe(torch.cat([target, second]))[0]
            row[f"max |Δ logit| in {mode} mode"] = (a - b).abs().max().item()
        rows.append(row)
    return pd.DataFrame(rows)


def running_mean_trace(steps: int = 60, batch_size: int = 100, momentum: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """How BatchNorm's running mean of MNIST patch pixels approaches the training-set mean, batch by batch.

    This is ViTBN's first norm (BatchNorm over the 49 pixels of each 7×7 patch) fed training
    batches as in an epoch; the error is the largest |running mean − training-set mean| over the
    49 features. With momentum m the initial error shrinks as (1 − m)^k; what remains is batch noise.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} is not allowed; it must be an integer >= 1")
    images, _ = data.load_mnist(train=True)
    patchify = Rearrange("b c (h p1) (w p2) -> (b h w) (p1 p2 c)", p1=7, p2=7)
    true_mean = patchify(data.to_float(images)).mean(dim=0)
    norm = BatchNorm(49, momentum=momentum).train()
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    rows = [{"step": 0, "max |error|": (norm.running_mean - true_mean).abs().max().item()}]
    with torch.no_grad():
        for step in range(1, steps + 1):
            batch = data.to_float(images[order[(step - 1) * batch_size : step * batch_size]])
            norm(patchify(batch))
            rows.append({"step": step, "max |error|": (norm.running_mean - true_mean).abs().max().item()})
    trace = pd.DataFrame(rows)
    trace["(1 − momentum)^step × initial error"] = trace["max |error|"].iloc[0] * (1 - momentum) ** trace["step"]
    trace.attrs.update(momentum=momentum, batch_size=batch_size)
    return trace


def running_stats_figure(result: ModelsResult):
    """The running-mean trace on a log scale, with the geometric envelope it should follow."""
    trace, settings = result.trace, result.settings
    figures.use_style()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        trace["step"],
        trace["max |error|"],
        marker="o",
        markersize=3,
        color=figures.color("ViTBN"),
        label="BatchNorm running mean (measured)",
    )
    ax.plot(
        trace["step"],
        trace["(1 − momentum)^step × initial error"],
        linestyle="--",
        color="0.4",
        label=f"(1 − {trace.attrs.get('momentum', 0.1):g})^step × initial error",
    )
    ax.set_yscale("log")
    ax.set(
        xlabel=f"training step (batch of {trace.attrs.get('batch_size', 100)} images)",
        ylabel="max |running mean − data mean| (pixel value)",
        title="Running mean of the patch-pixel BatchNorm converges to the data mean",
    )
    ax.legend()
    return figures.save_figure(
        fig,
        "02_running_stats",
        chapter=CHAPTER,
        reproduces="new/running_stats",
        profile=settings.profile,
        caption="Largest error of BatchNorm's running mean (49 patch pixels of MNIST training batches) against "
        "the training-set mean, per step; no model is trained.",
    )


def configurations() -> pd.DataFrame:
    """Every model configuration the book trains, with the chapters that use it."""
    uses: dict[tuple[str, int | None], list[str]] = {}

    def add(model, depth, use):
        uses.setdefault((model, depth), []).append(use)

    for model, depth in AS_RUN_DEPTH.items():
        add(model, depth, "article 1 as run (03, 04)")
    for model in VIT_FAMILY:  # the reference repository's transfer checkpoints are all depth 6
        add(model, TRANSFER_DEPTH, "EMNIST transfer (06)")
    for model in ("ViT", "ViTBNFFN"):
        for depth in DEPTHS:
            add(model, depth, "depth study (05)")
    for depth in EQUAL_DEPTHS:
        for model in VIT_FAMILY:
            add(model, depth, "equal depth")
    add("DNN_d3", None, "BatchNorm intro (01)")
    add("DNNBN_d3", None, "BatchNorm intro (01)")
    add("CNN", None, "inference reference (06)")
    order = list(MODELS)
    rows = [
        {"model": model, "depth": depth, "used in": "; ".join(dict.fromkeys(use))}
        for (model, depth), use in uses.items()
    ]
    table = pd.DataFrame(rows)
    table["_order"] = table["model"].map(order.index)
    table = table.sort_values(["_order", "depth"]).drop(columns="_order").reset_index(drop=True)
    table["depth"] = table["depth"].astype("Int64")
    return table


def forward_flops(model: nn.Module, image_size: int = 28, channels: int = 1) -> int:
    """Forward FLOPs for one image (eval mode): matmuls, attention products and convolutions, 2 per multiply-add.

    ``FlopCounterMode`` does not count the fused CPU attention kernel, so attention runs on its
    math backend here (the same arithmetic as two batched matmuls, which it does count).
    Norms, softmax, activations and additions are not counted.
    """
    model = model.eval()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, channels, image_size, image_size))
    return counter.get_total_flops()


def model_sizes(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """``configurations()`` with parameter counts and forward MFLOPs per image of each built model."""
    table = configurations() if table is None else table.copy()
    params, flops = [], []
    for row in table.itertuples():
        model = build_model(row.model, **({} if pd.isna(row.depth) else {"depth": int(row.depth)}))
        params.append(count_parameters(model))
        flops.append(forward_flops(model))
    table["parameters"] = params
    table["MFLOPs per image"] = np.array(flops) / 1e6
    return table


@dataclass(frozen=True)
class ModelsResult:
    """Chapter 02's measurements: the running-mean trace and every configuration's size (nothing is trained)."""

    settings: ModelsSettings
    trace: pd.DataFrame
    sizes: pd.DataFrame


def plan(settings: ModelsSettings) -> list:
    """Chapter 02 trains nothing."""
    return []


def run(settings: ModelsSettings, force: bool = False) -> ModelsResult:
    """Measure the running-mean trace and the size of every configuration (``force`` changes nothing)."""
    return ModelsResult(settings, running_mean_trace(), model_sizes())


def model_table(result: ModelsResult):
    """Save the size table (CSV + manifest, ``new/model_table``); returns it styled with its stamp."""
    sizes, settings = result.sizes, result.settings
    shown = sizes.copy()
    shown["depth"] = shown["depth"].astype(object).where(shown["depth"].notna(), "–")
    return figures.save_table(
        shown,
        "02_model_table",
        chapter=CHAPTER,
        reproduces="new/model_table",
        profile=settings.profile,
        caption="Parameters and forward FLOPs per image (batch of 1, eval mode; matmul/conv FLOPs, 2 per "
        "multiply-add; norms and softmax not counted) of every configuration in the book",
        precision=2,
    )


def model_size_figure(result: ModelsResult):
    """Parameters and FLOPs against depth per ViT family; the depth-free models as reference lines."""
    sizes, settings = result.sizes, result.settings
    figures.use_style()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    columns = (("parameters", 1e3, "parameters (thousands)"), ("MFLOPs per image", 1, "forward MFLOPs per image"))
    # The three families nearly coincide (a norm adds at most 2 x 128 parameters per block), so
    # they are drawn from wide and faint to narrow and solid to keep all three visible.
    looks = {
        "ViT": dict(marker="o", markersize=11, linewidth=7, alpha=0.35),
        "ViTBNFFN": dict(marker="s", markersize=6, linewidth=2),
        "ViTBN": dict(marker="D", markersize=5, linewidth=0),
    }
    for ax, (column, scale, label) in zip(axes, columns):
        for model in VIT_FAMILY:
            rows = sizes[(sizes["model"] == model) & sizes["depth"].notna()].sort_values("depth")
            depths = sorted(rows["depth"].astype(int))
            ax.plot(
                rows["depth"].astype(int),
                rows[column] / scale,
                color=figures.color(model),
                label=f"{model} (depths {', '.join(map(str, depths))})",
                **looks[model],
            )
        for model, depth in AS_RUN_DEPTH.items():
            point = sizes[(sizes["model"] == model) & (sizes["depth"] == depth)]
            ax.scatter(
                point["depth"].astype(int),
                point[column] / scale,
                s=320,
                facecolors="none",
                edgecolors="black",
                linewidths=1.3,
                zorder=3,
                label="article 1 as run (ViT d6; ViTBNFFN, ViTBN d1)" if model == "ViT" else None,
            )
        for model, style in (("DNN_d3", (0, (1, 1))), ("DNNBN_d3", (0, (4, 2))), ("CNN", (0, (6, 2, 1, 2)))):
            row = sizes[sizes["model"] == model]
            if not row.empty:
                ax.axhline(
                    row[column].iloc[0] / scale,
                    color=figures.color(model),
                    linestyle=style,
                    linewidth=1.6,
                    label=f"{model} (no encoder)",
                )
        ax.set(xlabel="encoder depth (blocks)", ylabel=label, xticks=list(DEPTHS), ylim=(0, None))
    axes[0].set_title("Parameters")
    axes[1].set_title("Forward FLOPs per image (batch of 1)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9)
    fig.suptitle("Model sizes of every configuration in the book")
    return figures.save_figure(
        fig,
        "02_model_sizes",
        chapter=CHAPTER,
        reproduces="new/model_sizes",
        profile=settings.profile,
        caption="Parameters and forward FLOPs per image vs encoder depth (ViT family); the DNNs and the CNN as "
        "horizontal lines; circled: article 1's trio as run (its BatchNorm models computed one block).",
    )


def size_summary(result: ModelsResult) -> Notes:
    """What the size table says about the comparisons of the book, computed from it."""
    sizes = result.sizes
    vit = (
        sizes[sizes["depth"].notna()]
        .astype({"depth": int})
        .set_index(["model", "depth"])[["parameters", "MFLOPs per image"]]
    )
    lines = []
    for model in VIT_FAMILY:
        rows = vit.loc[model].sort_index() if model in vit.index.get_level_values(0) else None
        if rows is not None and len(rows) >= 2:
            first, last = rows.index[0], rows.index[-1]
            per_block = (rows.loc[last] - rows.loc[first]) / (last - first)
            lines.append(
                f"{model}: each encoder block adds {per_block['parameters']:,.0f} parameters and "
                f"{per_block['MFLOPs per image']:.2f} MFLOPs per image; embedding, final norm and head hold "
                f"{rows.loc[first, 'parameters'] - per_block['parameters'] * first:,.0f} parameters."
            )
    published = {m: vit.loc[(m, d)] for m, d in AS_RUN_DEPTH.items() if (m, d) in vit.index}
    if "ViT" in published:
        for model in ("ViTBNFFN", "ViTBN"):
            if model in published:
                lines.append(
                    f"As article 1 ran them, ViT d{AS_RUN_DEPTH['ViT']} has "
                    f"{published['ViT']['parameters'] / published[model]['parameters']:.1f}× the parameters and "
                    f"{published['ViT']['MFLOPs per image'] / published[model]['MFLOPs per image']:.1f}× the "
                    f"FLOPs of {model} d{AS_RUN_DEPTH[model]}."
                )
    for depth in EQUAL_DEPTHS:
        present = [m for m in VIT_FAMILY if (m, depth) in vit.index]
        if len(present) > 1:
            parts = ", ".join(f"{m} {vit.loc[(m, depth), 'MFLOPs per image']:.2f}" for m in present)
            spread = _spread_percent([vit.loc[(m, depth), "MFLOPs per image"] for m in present])
            lines.append(
                f"At equal depth {depth} the MFLOPs per image are {parts} (largest difference "
                f"{spread:.2f} %): the counted matmuls are the same; the norms, which differ, are not counted."
            )
    return Notes(lines)


def _spread_percent(values) -> float:
    values = np.asarray(values, dtype=float)
    return 100 * (values.max() - values.min()) / values.min()
