"""Images moved between machines through a Docker registry, by digest.

A build node pushes the pack images it builds (``push``); the pack records the ``HOST:PORT/REPO@sha256:...``
reference the registry answered with (``Image.repo_digest``). Another node, or a ``gymnasium.make`` on a
trainer, pulls that exact image instead of rebuilding it (``pull``), and builds it when the registry does
not have it. envgen's tags are content hashes (``images.pack_image_tag``), so a node may also look an image
up by tag before building it (``pull_tag``): the same tag means the same recipe.

The registry is ``--registry HOST:PORT`` or ``ENVGEN_REGISTRY``. The transfer itself is the Docker engine's
(``docker push``/``pull`` through the SDK); this module only names references and reads the digest back.
"""

from __future__ import annotations

import os
import re

from ..errors import InputError, SandboxError

ENV = "ENVGEN_REGISTRY"
_HOST = re.compile(r"^[A-Za-z0-9.-]+(:\d+)?(/[a-z0-9._/-]+)?$")


def registry_of(value: str | None = None) -> str | None:
    """The registry to use: ``value``, else ``ENVGEN_REGISTRY``, else None (no registry: build locally).

    ``HOST:PORT`` (optionally with a path prefix); a scheme is refused because Docker chooses it (HTTPS, or
    plain HTTP for registries it is told are insecure, which includes every one on 127.0.0.0/8)."""
    value = value if value is not None else (os.environ.get(ENV) or None)
    if value is None:
        return None
    value = value.strip().rstrip("/")
    if "://" in value or not _HOST.match(value):
        raise InputError(f"registry {value!r}: give HOST:PORT (e.g. 127.0.0.1:5000), without a scheme")
    return value


def remote_name(registry: str, tag: str) -> tuple[str, str]:
    """(repository, tag) of the local image ``tag`` (``REPO:TAG``) in ``registry``."""
    repo, _, name = tag.rpartition(":")
    if not repo or "/" in name:
        raise InputError(f"image {tag!r} has no tag; expected REPO:TAG")
    return f"{registry}/{repo}", name


def push(client, tag: str, registry: str, *, log=None) -> str:
    """Push the local image ``tag`` to ``registry``; return its ``HOST:PORT/REPO@sha256:...`` reference."""
    import docker

    repo, name = remote_name(registry, tag)
    try:
        client.images.get(tag).tag(repo, name)
        digest = None
        for chunk in client.images.push(repo, tag=name, stream=True, decode=True):
            if chunk.get("error"):
                raise SandboxError(f"pushing {tag} to {registry} failed: {chunk['error']}")
            digest = (chunk.get("aux") or {}).get("Digest") or digest
    except docker.errors.APIError as e:
        raise SandboxError(f"pushing {tag} to {registry} failed: {e.explanation or e}") from None
    if not digest:
        raise SandboxError(f"pushing {tag} to {registry}: the registry answered without a digest")
    if log is not None:
        log(f"pushed {tag} as {repo}@{digest}")
    return f"{repo}@{digest}"


def pull(client, ref: str, tag: str, *, log=None) -> bool:
    """Pull ``ref`` (``REPO@sha256:...`` or ``REPO:TAG``) and tag it locally as ``tag``; False when the
    registry does not have it or cannot be reached (the caller builds instead)."""
    import docker

    try:
        image = client.images.pull(ref)
    except (docker.errors.NotFound, docker.errors.APIError) as e:
        if log is not None:
            log(f"not pulled {ref}: {getattr(e, 'explanation', None) or e}")
        return False
    repo, _, name = tag.rpartition(":")
    image.tag(repo, name)
    if log is not None:
        log(f"pulled {ref} as {tag}")
    return True


def pull_tag(client, registry: str, tag: str, *, log=None) -> bool:
    """Pull the image a registry holds under ``tag``'s name (a content-hash tag: same name, same recipe)."""
    repo, name = remote_name(registry, tag)
    return pull(client, f"{repo}:{name}", tag, log=log)
