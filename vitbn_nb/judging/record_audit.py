"""Recording the reference audit (``python -m vitbn_nb.judging.record_audit FOLDER``): the block usage and MNIST
scores of the reference checkpoints in ``FOLDER``, written to the JSON the book reads where the internet is not
reachable. Run by a maintainer with the checkpoints at hand, never by a chapter."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from .audit import RECORDED, REFERENCE_CHECKPOINTS, REFERENCE_REPOSITORY, audit_folder


def record(folder, target=RECORDED) -> Path:
    """Write the recorded audit from the checkpoints in ``folder``."""
    result = audit_folder(folder)
    payload = {
        "recorded": dt.date.today().isoformat(),
        "how": "vitbn_nb.judging.audit.block_usage and mnist_accuracy (the book's own classes) on the checkpoints "
        f"of github.com/{REFERENCE_REPOSITORY} at the commits named per checkpoint",
        "checkpoints": {
            name: {
                **REFERENCE_CHECKPOINTS[name],
                "blocks": json.loads(group.drop(columns=["checkpoint", "commit", "model"]).to_json(orient="records")),
            }
            for name, group in result.blocks.groupby("checkpoint", sort=False)
        },
        "scores": json.loads(result.scores.to_json(orient="records")),
    }
    Path(target).write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    return Path(target)


if __name__ == "__main__":
    print(record(sys.argv[1]))
