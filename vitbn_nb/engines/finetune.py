"""Fine-tuning helpers: which weights train (:func:`attention_only`: Touvron et al. 2022's ``--attn-only``), a model
moved to another image size, and what a step costs."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..models.norms import check_choice
from ..models.vit import Attention
from ..system import synchronize

TRAINABLE = ("all", "attention")


@dataclass
class Trainable:
    """Which parameters a fine-tuning updates: counts and names."""

    trainable: int
    total: int
    names: list[str] = field(default_factory=list)


def _report(model: nn.Module) -> Trainable:
    params = list(model.named_parameters())
    names = [name for name, p in params if p.requires_grad]
    return Trainable(sum(p.numel() for _, p in params if p.requires_grad), sum(p.numel() for _, p in params), names)


def full(model: nn.Module) -> Trainable:
    """Every parameter trainable (ordinary fine-tuning)."""
    model.requires_grad_(True)
    return _report(model)


def attention_only(model: nn.Module, *, norm: bool = False, pos_embedding: bool = True) -> Trainable:
    """Freeze everything but the MHSA projections, the head and (``pos_embedding``) the position embedding; ``norm``
    also trains each attention's pre-norm. Parallel blocks: every branch's attention trains."""
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    if not attentions or not hasattr(model, "mlp_head"):
        raise ValueError(
            f"model={type(model).__name__} is not allowed: attention_only needs a ViT-family model "
            "(multi-head attention blocks and an mlp_head)"
        )
    model.requires_grad_(False)
    for attention in attentions:
        attention.to_qkv.requires_grad_(True)
        attention.to_out.requires_grad_(True)
        if norm:
            attention.norm.requires_grad_(True)
    model.mlp_head.requires_grad_(True)
    if pos_embedding and isinstance(getattr(model, "pos_embedding", None), nn.Parameter):
        model.pos_embedding.requires_grad_(True)
    return _report(model)


def set_trainable(model: nn.Module, trainable: str) -> Trainable:
    """``'all'`` -> :func:`full`, ``'attention'`` -> :func:`attention_only` (the run store's names)."""
    check_choice("trainable", trainable, TRAINABLE)
    return full(model) if trainable == "all" else attention_only(model)


# -- Another image size: the position embedding interpolated on its 2-D grid ------------------------------------------
def interpolate_pos_embedding(pos_embedding: Tensor, old_grid, new_grid, *, mode: str = "bicubic") -> Tensor:
    """``(1, 1 + h*w, d)`` -> ``(1, 1 + H*W, d)``: the class token kept, the patch positions resized as a 2-D map from
    ``old_grid`` to ``new_grid`` (``'bicubic'`` as DeiT does, or ``'bilinear'``)."""
    check_choice("mode", mode, ("bicubic", "bilinear"))
    (h, w), (H, W) = tuple(old_grid), tuple(new_grid)
    if pos_embedding.dim() != 3 or pos_embedding.shape[1] != 1 + h * w:
        raise ValueError(
            f"pos_embedding of shape {tuple(pos_embedding.shape)} does not hold the class token plus an "
            f"old_grid={old_grid!r} of patches"
        )
    if (h, w) == (H, W):
        return pos_embedding.clone()
    grid = rearrange(pos_embedding[:, 1:], "b (h w) d -> b d h w", h=h, w=w)
    grid = F.interpolate(grid.float(), size=(H, W), mode=mode, align_corners=False).to(pos_embedding.dtype)
    return torch.cat((pos_embedding[:, :1], rearrange(grid, "b d h w -> b (h w) d")), dim=1)


def load_resized(model: nn.Module, state_dict: dict, old_grid) -> nn.Module:
    """Load ``state_dict`` (trained on a patch grid ``old_grid``) into ``model`` of any grid size."""
    state = dict(state_dict)
    if "pos_embedding" in state and isinstance(model.pos_embedding, nn.Parameter):
        state["pos_embedding"] = interpolate_pos_embedding(state["pos_embedding"], old_grid, model.grid_size)
    model.load_state_dict(state)
    return model


# -- What one training step holds in memory, and how long it takes ----------------------------------------------------
def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def step_memory(model: nn.Module, images: Tensor, labels: Tensor) -> dict:
    """Memory (MiB) of one Adam step of a copy of ``model`` on this batch: ``weights`` + ``gradients`` + ``adam_state``
    + ``activations`` (saved storages) = ``accounted``; on CUDA also the allocator's ``cuda_peak`` (NaN on the CPU)."""
    model = copy.deepcopy(model).train()
    device = images.device
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-6)

    params, saved = {p.untyped_storage().data_ptr() for p in model.parameters()}, {}

    def pack(t):  # the storages autograd saves for the backward pass, by address (a parameter is no activation)
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    cuda_peak = float("nan")
    if device.type == "cuda":
        step()
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        cuda_peak = torch.cuda.max_memory_allocated(device) / 2**20
    saved.clear()  # the last step's activations alone
    step()
    adam = [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0]
    mib = {
        "weights": _bytes(model.parameters()) / 2**20,
        "gradients": _bytes(p.grad for p in trainable if p.grad is not None) / 2**20,
        "adam_state": _bytes(adam) / 2**20,
        "activations": sum(saved.values()) / 2**20,
    }
    return {**mib, "accounted": sum(mib.values()), "cuda_peak": cuda_peak}
