"""Packs' episodes over the network (OpenEnv's protocol): the server (`server`) and a client (`client`).

``envgen serve PACK...`` runs `serve`; any OpenEnv ``EnvClient`` drives its sessions, and the remote sandbox
backend (``envgen.sandbox.remote``, ``sandbox="remote:URL"``) runs envgen's own consumers on it.
"""

from __future__ import annotations

import ipaddress
import secrets

from ..errors import InputError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(token: str | None, no_token: bool, host: str) -> str | None:
    """The token the server requires: the one given, else a new random one; None only with ``no_token`` on
    a loopback address (anyone who can reach a non-loopback port would get a sandbox)."""
    if no_token:
        if token:
            raise InputError("--no-token and a token (--token or ENVGEN_SERVE_TOKEN) together: choose one")
        if not is_loopback(host):
            raise InputError(f"--no-token is only allowed on a loopback address (127.0.0.1, ::1), not {host!r}")
        return None
    return token or secrets.token_urlsafe(24)
