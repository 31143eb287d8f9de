"""Packs: the on-disk format (``format``), Hub publishing (``hub``) and opening a path or Hub id (``resolve``).

The format's public names are re-exported here, so ``from envgen.pack import Pack, Task, load`` works.
"""

from .format import (CARD, ENV, HIDDEN, MANIFEST, SCHEMA_VERSION, TASKS, VERIFIER_KINDS, FunctionSpec, Image,
                     Limits, Manifest, Message, Pack, Provenance, Reference, Task, ToolCall, ToolSchema, Verifier,
                     cached_content_hash, card, content_hash, load, save, task_stats, verify_hash)

__all__ = ["CARD", "ENV", "HIDDEN", "MANIFEST", "SCHEMA_VERSION", "TASKS", "VERIFIER_KINDS", "FunctionSpec", "Image",
           "Limits", "Manifest", "Message", "Pack", "Provenance", "Reference", "Task", "ToolCall", "ToolSchema",
           "Verifier", "cached_content_hash", "card", "content_hash", "load", "save", "task_stats", "verify_hash"]
