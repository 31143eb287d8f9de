"""Open a pack by reference: a loaded Pack, a directory, or ``hf://ORG/NAME[@REVISION]`` from the Hub.

Above both ``pack`` (the format) and ``hub`` (which needs the format), so neither imports the other's caller.
"""

from __future__ import annotations

import os

from .hub import pull
from .pack import Pack, load

HUB_PREFIX = "hf://"


def open_pack(ref: str | os.PathLike | Pack) -> Pack:
    """A loaded pack from a Pack, a directory path, or ``hf://ORG/NAME[@REVISION]`` (pulled from the Hub)."""
    if isinstance(ref, Pack):
        return ref
    text = os.fspath(ref)
    if text.startswith(HUB_PREFIX):
        return pull(text[len(HUB_PREFIX):])
    return load(text)
