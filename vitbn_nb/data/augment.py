"""Article 2's augmentation: the per-sample reference pipeline and its batched on-device equivalent."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from .files import SIZE, ensure_mnist

ROTATION_DEG = 20.0
TRANSLATE_FRAC = 0.2
ZOOM_P = 0.2
ZOOM_SIDE = (2.0, 3.0)


def reference_augmentation() -> Callable:
    """Article 2's transforms as the reference code composes them (``get_datasets_mnist`` in
    ``mlflow_modules/train_augs_mnist.py`` at commit 3b59bbf): PIL in, float tensor in [0,1] out, no normalisation
    (the reference code applies none; article 2's text names none)."""
    from torchvision import transforms as T
    from torchvision.transforms import v2

    return T.Compose(
        [
            T.RandomRotation(ROTATION_DEG),
            T.RandomAffine(degrees=0, translate=(TRANSLATE_FRAC, TRANSLATE_FRAC)),
            v2.RandomZoomOut(fill=0, side_range=ZOOM_SIDE, p=ZOOM_P),
            T.Resize(SIZE),
            T.ToTensor(),
        ]
    )


def reference_dataset(train: bool, augment: bool, root: str | Path | None = None) -> torch.utils.data.Dataset:
    """torchvision's MNIST with the reference transform (or plain ToTensor): article 1's and article 2's pipeline."""
    import torchvision
    from torchvision import transforms as T

    transform = reference_augmentation() if augment else T.ToTensor()
    return torchvision.datasets.MNIST(ensure_mnist(root), train=train, transform=transform)


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 -> float32 in [0,1], exactly as ToTensor scales."""
    return images.to(torch.float32).div(255)


def uniforms(batch: int, generator: torch.Generator | None) -> torch.Tensor:
    """The uniform draws ``[B, 7]`` behind a batch's augmentation, drawn where ``generator`` lives (the engine's are on
    the CPU: one data stream per seed on every device, moved to the device after drawing)."""
    return torch.rand(batch, 7, generator=generator, device=generator.device if generator is not None else "cpu")


def _params_from(u: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every random choice of the reference pipeline per sample from its draws ``u`` ``[B, 7]`` (torchvision 0.29's)."""
    max_shift = TRANSLATE_FRAC * SIZE
    canvas = torch.floor(SIZE * (ZOOM_SIDE[0] + u[:, 4] * (ZOOM_SIDE[1] - ZOOM_SIDE[0])))
    return {
        "angle": (2 * u[:, 0] - 1) * ROTATION_DEG,
        "tx": torch.round((2 * u[:, 1] - 1) * max_shift),
        "ty": torch.round((2 * u[:, 2] - 1) * max_shift),
        "zoom": u[:, 3] < ZOOM_P,
        "canvas": canvas,
        "left": torch.floor((canvas - SIZE) * u[:, 5]),
        "top": torch.floor((canvas - SIZE) * u[:, 6]),
    }


def _rotate_translate(images: torch.Tensor, angle, tx, ty) -> torch.Tensor:
    """Rotation about the centre (nearest, zero fill), clipped to the frame, then integer shift."""
    b, dev = images.shape[0], images.device
    rad = torch.deg2rad(angle.to(torch.float32))
    cos, sin = torch.cos(rad), torch.sin(rad)
    # Output pixel p comes from q = p - t, rotated back into the source as PIL does ([[c, -s], [s, c]] about centre).
    txn, tyn = 2 * tx.float() / SIZE, 2 * ty.float() / SIZE
    theta = torch.stack(
        [torch.stack([cos, -sin, -(cos * txn - sin * tyn)], 1), torch.stack([sin, cos, -(sin * txn + cos * tyn)], 1)], 1
    )
    grid = F.affine_grid(theta, [b, 1, SIZE, SIZE], align_corners=False)
    out = F.grid_sample(images.to(torch.float32), grid, mode="nearest", padding_mode="zeros", align_corners=False)
    # The reference clips the rotated image to the frame before shifting it: a pixel whose q lies outside it is zero.
    pos = torch.arange(SIZE, device=dev)
    inside_x = ((pos - tx[:, None]) >= 0) & ((pos - tx[:, None]) < SIZE)
    inside_y = ((pos - ty[:, None]) >= 0) & ((pos - ty[:, None]) < SIZE)
    return out * (inside_y[:, :, None] & inside_x[:, None, :])[:, None].to(out.dtype)


_PRECISION_BITS = 22  # Pillow's Resample.c: 32 - 8 - 2


def _pil_filter_rows(width: torch.Tensor, columns: int) -> torch.Tensor:
    """Pillow's fixed-point bilinear weights for resizing rows of each ``width`` to 28 pixels, [len(width), 28 out,
    ``columns`` src]: its triangle filter widened by the scale (antialias), zero beyond the width."""
    dev = width.device
    width = width.to(torch.float64)[:, None, None]
    scale = width / SIZE  # >= 1 here, so Pillow's filterscale = scale and support = scale
    center = (torch.arange(SIZE, device=dev, dtype=torch.float64)[None, :, None] + 0.5) * scale
    j = torch.arange(columns, device=dev, dtype=torch.float64)[None, None]
    xmin = torch.floor(center - scale + 0.5).clamp(min=0)
    xmax = torch.minimum(torch.floor(center + scale + 0.5), width)
    w = (1 - ((j - center + 0.5) * (1.0 / scale)).abs()).clamp(min=0)
    w = w * ((j >= xmin) & (j < xmax))
    w = w / w.sum(-1, keepdim=True)
    return torch.floor(0.5 + w * (1 << _PRECISION_BITS))


@functools.lru_cache(maxsize=8)
def _pil_filter_table(max_width: int, device: str) -> torch.Tensor:
    """``_pil_filter_rows`` for every canvas width 28..max_width, once per device: a batch looks its weights up."""
    return _pil_filter_rows(torch.arange(SIZE, max_width + 1, device=device), max_width + 1)


def _pil_bilinear_weights(canvas: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Pillow's resize weights canvas -> 28 [B, 28 out, 28 src], at the 28 columns from ``offset`` that hold the pasted
    image (the rest of the canvas is zero fill)."""
    max_width = int(ZOOM_SIDE[1] * SIZE)
    k = _pil_filter_table(max_width, str(canvas.device))[canvas.long() - SIZE]
    cols = offset.long()[:, None] + torch.arange(SIZE, device=canvas.device)[None]
    return torch.gather(k, 2, cols[:, None, :].expand(-1, SIZE, -1))


def _pil_round(acc: torch.Tensor) -> torch.Tensor:
    # Pillow adds half an LSB, shifts out the fraction and clips to uint8 after each pass.
    return torch.floor((acc + (1 << (_PRECISION_BITS - 1))) / (1 << _PRECISION_BITS)).clamp(0, 255)


def _zoom_out(images: torch.Tensor, canvas, left, top) -> torch.Tensor:
    """Paste on a zero canvas, resize back to 28 as Pillow does: horizontal pass, then vertical."""
    x = images[:, 0].to(torch.float64)  # integer arithmetic below stays exact in float64
    kx = _pil_bilinear_weights(canvas, left)
    ky = _pil_bilinear_weights(canvas, top)
    rows = _pil_round(x @ kx.transpose(1, 2))
    return _pil_round(ky @ rows)[:, None].to(images.dtype)


def _apply_params(images: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    out = _rotate_translate(images, p["angle"], p["tx"], p["ty"])  # uint8 values as float32
    if out.device.type == "cpu":
        # On the CPU, picking the chosen fifth costs no device sync and saves four fifths of the zoom, which is exact
        # integer arithmetic per sample: bit for bit what zooming everything and keeping the chosen ones gives.
        chosen = p["zoom"].nonzero().squeeze(1)
        if len(chosen):
            out[chosen] = _zoom_out(out[chosen], p["canvas"][chosen], p["left"][chosen], p["top"][chosen])
        return out / 255
    # On an accelerator, zooming every sample and keeping a fifth spares a device-to-host sync.
    zoomed = _zoom_out(out, p["canvas"], p["left"], p["top"])
    return torch.where(p["zoom"][:, None, None, None], zoomed, out) / 255


def augment_batch(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Article 2's augmentation for a whole batch on its device: uint8 [B,1,28,28] -> float [0,1], with the
    distributions and roundings of ``reference_augmentation()`` (the zoom's resize bit for bit, the rotation's nearest
    sampling off in ~3 pixels in 10^5); the random stream is ``generator``'s, so outputs match in distribution."""
    return augment_drawn(images, uniforms(_check_batch(images).shape[0], generator).to(images.device))


def augment_drawn(images: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """:func:`augment_batch` from its uniform draws ``[B, 7]`` (:func:`uniforms`), already on the images' device."""
    return _apply_params(_check_batch(images), _params_from(draws))


def _check_batch(images: torch.Tensor) -> torch.Tensor:
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1:] != (1, SIZE, SIZE):
        raise ValueError(f"augment_batch takes uint8 [B,1,28,28], got {images.dtype} {tuple(images.shape)}")
    return images


def augment_members(images: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """:func:`augment_drawn` for a stack's members at once (``[M, B, ...]``), bit for bit as one by one."""
    if images.ndim != 5 or draws.shape != (*images.shape[:2], 7):
        raise ValueError(
            f"augment_members takes uint8 [M,B,1,28,28] and draws [M,B,7], got {tuple(images.shape)} and "
            f"{tuple(draws.shape)}"
        )
    members, batch = images.shape[:2]
    flat = _check_batch(images.flatten(0, 1))
    return _apply_params(flat, _params_from(draws.flatten(0, 1))).view(members, batch, 1, SIZE, SIZE)
