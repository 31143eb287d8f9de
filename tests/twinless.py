"""A code pack as it was before twin checks, for showing that a forgery is real: it buys the twinless copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from envgen.pack import save


def without_twins(pack, dest: Path):
    """A copy of the pack (saved at ``dest``) whose task has no twin checks: ``args["twins"]`` and
    ``hidden/twins.json`` removed, everything else the same."""
    task = pack.tasks[0]
    args = dict(task.verifier.args)
    assert args.pop("twins")["files"] == "twins.json", "the pack has no twin checks to remove"
    hidden = dest.parent / f"{dest.name}-hidden"
    shutil.copytree(pack.hidden_dir, hidden)
    (hidden / "twins.json").unlink()
    new = task.model_copy(update={"verifier": task.verifier.model_copy(update={"args": args})})
    return save(type(pack)(pack.manifest, [new], pack.root), dest, env_from=pack.root / "env", hidden_from=hidden)
