"""Every existing model builds as it did: the same state-dict keys and shapes, the same initial weights from the
same random seed, and the same outputs. The committed checkpoints and records were made by these models, so a
refactoring of how they are assembled (norms as layer factories) must leave all three exactly as they were.

``tests/model_pins.json`` was written from the code before that refactoring; rewrite it with
``python tests/test_model_pins.py`` only for a deliberate change of a model, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

PINNED = Path(__file__).with_name("model_pins.json")

#: (name, model, overrides): every model of the registry, and the ViT family's options at each norm.
CASES = [
    ("ViT-d2", "ViT", dict(depth=2)),
    ("ViTBNFFN-d2", "ViTBNFFN", dict(depth=2)),
    ("ViTBN-d2", "ViTBN", dict(depth=2)),
    ("ViT-as-run", "ViT", {}),
    ("ViTBN-as-run", "ViTBN", {}),
    ("ViTBNFFN-as-run", "ViTBNFFN", {}),
    ("DNN_d3", "DNN_d3", {}),
    ("DNNBN_d3", "DNNBN_d3", {}),
    ("CNN", "CNN", {}),
]
for _name in ("ViT", "ViTBNFFN", "ViTBN"):
    CASES += [
        (f"{_name}-hmlp", _name, dict(depth=1, stem="hmlp")),
        (f"{_name}-branches2", _name, dict(depth=2, branches=2)),
        (f"{_name}-qkvbias-pe1d-mean", _name, dict(depth=1, qkv_bias=True, pos_emb="pe1d", pool="mean")),
    ]


def fingerprint(model_name: str, overrides: dict) -> dict:
    from vitbn_nb.models import build_model

    torch.manual_seed(1234)
    model = build_model(model_name, **overrides)
    state = model.state_dict()
    weights = hashlib.sha256()
    for key, value in state.items():
        weights.update(key.encode())
        weights.update(value.detach().cpu().contiguous().numpy().tobytes())
    x = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        train_out = model.train()(x).double()
        eval_out = model.eval()(x).double()
    return {
        "keys": [[key, list(value.shape)] for key, value in state.items()],
        "weights_sha256": weights.hexdigest(),
        "train_output": [*train_out.flatten()[:8].tolist(), float(train_out.sum()), float(train_out.abs().sum())],
        "eval_output": [*eval_out.flatten()[:8].tolist(), float(eval_out.sum()), float(eval_out.abs().sum())],
    }


@pytest.mark.parametrize("name, model_name, overrides", CASES, ids=[c[0] for c in CASES])
def test_model_builds_as_pinned(name, model_name, overrides):
    pinned = json.loads(PINNED.read_text())[name]
    now = fingerprint(model_name, overrides)
    assert now["keys"] == pinned["keys"]
    assert now["weights_sha256"] == pinned["weights_sha256"]
    for which in ("train_output", "eval_output"):
        assert now[which] == pytest.approx(pinned[which], rel=1e-5, abs=1e-6), which


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    pins = {name: fingerprint(model_name, overrides) for name, model_name, overrides in CASES}
    PINNED.write_text(json.dumps(pins, indent=1) + "\n")
    print(f"wrote {PINNED}")
