"""Open a pack by reference: a loaded Pack, a directory, or ``hf://ORG/NAME[@REVISION]`` from the Hub.

Above both ``pack`` (the format) and ``hub`` (which needs the format), so neither imports the other's caller.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from ..errors import PackError
from .hub import pull
from .format import Pack, load, save, verify_hash

HUB_PREFIX = "hf://"


def open_pack(ref: str | os.PathLike | Pack, *, allow_modified: bool = False,
              log: Callable[[str], None] | None = None) -> Pack:
    """A loaded pack from a Pack, a directory path, or ``hf://ORG/NAME[@REVISION]`` (pulled from the Hub).

    A directory's content hash is checked against its manifest (cached by file size and mtime): a pack
    modified since it was saved raises PackError, unless ``allow_modified``, which re-hashes it in place
    (pack.json gets the new version) and says so through ``log``. A Pack object is taken as it is.
    """
    if isinstance(ref, Pack):
        return ref
    text = os.fspath(ref)
    if text.startswith(HUB_PREFIX):
        return pull(text[len(HUB_PREFIX):])  # pull verifies the hash itself
    pack = load(text)
    try:
        verify_hash(pack)
    except PackError:
        if not allow_modified:
            raise
        old = pack.manifest.version
        pack = save(pack, pack.root)
        (log or _warn)(f"{pack.root}: modified since it was saved; re-hashed (--allow-modified): version "
                       f"{old[:19] or 'none'} -> {pack.manifest.version[:19]}")
    return pack


def _warn(message: str) -> None:
    print(message, file=sys.stderr)
