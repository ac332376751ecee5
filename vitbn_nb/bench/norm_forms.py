"""The three ways of writing BatchNorm on ``(b, n, d)`` tokens (article 1's BatchNorm1d over ``b d n``, article 2's
BatchNorm2d over ``b d n 1``, and the flattened ``(b n) d`` BatchNorm1d of :class:`vitbn_nb.models.BatchNorm`), timed
and compared."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from ..models import BatchNorm
from ..system import pick_device
from . import timing


class TransposedBatchNorm1d(nn.BatchNorm1d):
    """Article 1: ``b n d -> b d n``, BatchNorm1d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n")), "b d n -> b n d")


class TransposedBatchNorm2d(nn.BatchNorm2d):
    """Article 2: ``b n d -> b d n 1``, BatchNorm2d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n 1")), "b d n 1 -> b n d")


NORM_FORMS = {
    "BatchNorm1d over b d n (article 1)": TransposedBatchNorm1d,
    "BatchNorm2d over b d n 1 (article 2)": TransposedBatchNorm2d,
    "BatchNorm1d over flattened (b n) d (vitbn_nb)": BatchNorm,
}


def time_norm_forms(
    device=None,
    *,
    batch: int = 100,
    test_batch: int = 5000,
    tokens: int = 17,
    dims: tuple[int, ...] = (64, 128),
    min_run_time: float = 0.2,
) -> list[dict]:
    """Each form's time for a training forward+backward on ``(batch, tokens, d)`` and an eval
    forward on ``(test_batch, tokens, d)`` (``torch.utils.benchmark``: the median over blocks of calls
    lasting ``min_run_time`` seconds in all), and how far its output is from the flattened form's (they
    compute the same thing)."""
    device = pick_device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    rows = []
    for dim in dims:
        for mode, n in (("train forward+backward", batch), ("eval forward", test_batch)):
            x = torch.randn(n, tokens, dim, device=device, generator=generator) * 2 + 0.5
            grad = torch.randn(n, tokens, dim, device=device, generator=generator)
            outputs = {}
            running_mean = torch.rand(dim, device=device, generator=generator) - 0.5
            running_var = torch.rand(dim, device=device, generator=generator) * 1.5 + 0.5
            for form, cls in NORM_FORMS.items():
                norm = cls(dim).to(device)
                norm.running_mean.copy_(running_mean)  # the same statistics for every form, so eval outputs agree
                norm.running_var.copy_(running_var)
                norm.train(mode.startswith("train"))
                xin = x.clone().requires_grad_(mode.startswith("train"))

                training = mode.startswith("train")

                def once(norm=norm, xin=xin, grad=grad, training=training):
                    if training:
                        out = norm(xin)
                        out.backward(grad)
                        return out
                    with torch.inference_mode():
                        return norm(xin)

                outputs[form] = once().detach()
                timed = timing.autorange(once, min_run_time=min_run_time)
                rows.append(
                    {
                        "form": form,
                        "mode": mode,
                        "dim": dim,
                        "shape": [n, tokens, dim],
                        "microseconds": 1e6 * timed.seconds,
                    }
                )
            reference = outputs["BatchNorm1d over flattened (b n) d (vitbn_nb)"]
            for row in rows[-len(NORM_FORMS) :]:
                row["max_abs_difference"] = float((outputs[row["form"]] - reference).abs().max())
            fastest = min(r["microseconds"] for r in rows[-len(NORM_FORMS) :])
            for row in rows[-len(NORM_FORMS) :]:
                row["relative_to_fastest"] = row["microseconds"] / fastest
    return rows
