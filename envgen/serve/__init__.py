"""Packs' episodes over the network (OpenEnv's protocol): the server (`server`) and a client (`client`).

``envgen serve PACK...`` runs `serve`; any OpenEnv ``EnvClient`` drives its sessions, and the remote sandbox
backend (``envgen.sandbox.remote``, ``sandbox="remote:URL"``) runs envgen's own consumers on it.
"""
