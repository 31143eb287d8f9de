"""Errors a user or a model can cause. The CLI prints them as one line (no traceback unless --debug)."""


class EnvgenError(Exception):
    """An error caused by input (a pack, a flag, a file): its message names the input and the fix."""


class PackError(EnvgenError):
    """A pack that does not load: the message names the file, the line (where there is one) and the field."""


class SandboxError(EnvgenError):
    """A sandbox that could not start or that died in a way the episode cannot recover from."""
