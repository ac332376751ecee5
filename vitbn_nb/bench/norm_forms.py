"""The three ways of writing BatchNorm on ``(b, n, d)`` tokens (article 1's BatchNorm1d over ``b d n``, article 2's
BatchNorm2d over ``b d n 1``, and the flattened ``(b n) d`` BatchNorm1d of :class:`vitbn_nb.models.BatchNorm`), timed
and compared."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from .. import timing
from ..models import BatchNorm
from ..system import pick_device


class TransposedBatchNorm1d(nn.BatchNorm1d):
    """Article 1: ``b n d -> b d n``, BatchNorm1d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n")), "b d n -> b n d")


class TransposedBatchNorm2d(nn.BatchNorm2d):
    """Article 2: ``b n d -> b d n 1``, BatchNorm2d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n 1")), "b d n 1 -> b n d")


FLAT = "BatchNorm1d over flattened (b n) d (vitbn_nb)"
NORM_FORMS = {
    "BatchNorm1d over b d n (article 1)": TransposedBatchNorm1d,
    "BatchNorm2d over b d n 1 (article 2)": TransposedBatchNorm2d,
    FLAT: BatchNorm,
}


def time_norm_forms(
    device=None,
    *,
    batch: int = 100,
    test_batch: int = 5000,
    tokens: int = 17,
    dims: tuple[int, ...] = (64, 128),
    min_run_time: float = 0.2,
    repeats: int = 5,
) -> list[dict]:
    """Each form's time for a training forward+backward and an eval forward, and its distance from the flattened
    form's output; the forms are timed in ``repeats`` interleaved rounds (``microseconds_rounds``, judged round by
    round), ``microseconds`` being the median round."""
    device = pick_device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    rows = []
    for dim in dims:
        for mode, n in (("train forward+backward", batch), ("eval forward", test_batch)):
            x = torch.randn(n, tokens, dim, device=device, generator=generator) * 2 + 0.5
            grad = torch.randn(n, tokens, dim, device=device, generator=generator)
            outputs, runners = {}, {}
            running_mean = torch.rand(dim, device=device, generator=generator) - 0.5
            running_var = torch.rand(dim, device=device, generator=generator) * 1.5 + 0.5
            training = mode.startswith("train")
            for form, cls in NORM_FORMS.items():
                norm = cls(dim).to(device)
                norm.running_mean.copy_(running_mean)  # the same statistics for every form, so eval outputs agree
                norm.running_var.copy_(running_var)
                norm.train(training)
                xin = x.clone().requires_grad_(training)

                def once(norm=norm, xin=xin, grad=grad, training=training):
                    if training:
                        out = norm(xin)
                        out.backward(grad)
                        return out
                    with torch.inference_mode():
                        return norm(xin)

                outputs[form] = once().detach()
                # calls per block, from one timed call: the rounds of a form take about min_run_time in all
                one = timing.block(once, calls=1, device=device)
                calls = max(1, int(min_run_time / repeats / max(one, 1e-7)))
                runners[form] = lambda length, once=once, calls=calls: {
                    "seconds": timing.block(once, calls=calls * length, device=device)
                }
            rounds = timing.interleave(runners, warmup=1, repeats=repeats, length=1)
            reference = outputs[FLAT]
            case = [
                {
                    "form": form,
                    "mode": mode,
                    "dim": dim,
                    "shape": [n, tokens, dim],
                    "microseconds": 1e6 * timing.median_repeat(timed)["seconds"],
                    "microseconds_rounds": [1e6 * r["seconds"] for r in timed],
                    "max_abs_difference": float((outputs[form] - reference).abs().max()),
                }
                for form, timed in rounds.items()
            ]
            fastest = min(r["microseconds"] for r in case)
            rows += [row | {"relative_to_fastest": row["microseconds"] / fastest} for row in case]
    return rows
