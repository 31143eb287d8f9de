"""Sandbox images, built offline and tagged by the content hash of their recipe.

Three layers, each reused whenever its tag is present (never rebuilt):

- base: ``debootstrap --variant=minbase`` of a Debian suite with python3 and ca-certificates, imported with
  the docker SDK (no registry pull, so it works where Docker Hub does not), with the host CA bundle
  installed so pip/npm work behind a TLS-inspecting proxy; optional toolchain layers (node, go, jdk, gcc,
  php) are Debian packages installed on top;
- family: the base plus the runtime server, the container supervisor and the verifier kit (as files under
  /opt/envgen), the unprivileged sandbox user and the family's extra packages;
- pack: the family image plus the pack's ``env/`` at /env, built from ``env/Dockerfile`` (or a generated
  one). ``hidden/`` never enters an image.

Tags hash the recipe (suite, packages, CA bundle, files, Dockerfile text), never a build's timestamps, so
the same inputs give the same tag on every machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .engine import engine
from .registry import pull_tag, push, registry_of
from ..errors import BuildError, InputError
from ..pack.format import Pack, save
from ..paths import bundled, cache_dir

RECIPE_VERSION = 1
SANDBOX_UID = 10001
SANDBOX_USER = "sandbox"
RUNTIME_DIR = "/opt/envgen/runtime"
VERIFIERS_DIR = "/opt/envgen/verifiers"
ENV_DIR = "/env"
WORK_DIR = "/work"
IO_DIR = "/run/envgen"
BASE_REPO, FAMILY_REPO, PACK_REPO = "envgen/base", "envgen/family", "envgen/pack"
CA_IN_IMAGE = "/etc/ssl/certs/ca-certificates.crt"
HOST_CA_IN_IMAGE = "usr/local/share/ca-certificates/envgen-host.crt"
"""Where the host bundle lands; Debian's update-ca-certificates (e.g. a JDK install) keeps merging it in."""

CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")


@dataclass(frozen=True)
class Suite:
    distro: str
    name: str
    python: str
    archived: bool = False
    """Moved off the regular mirrors to Debian's archive: fetched from ENVGEN_DEBIAN_ARCHIVE_MIRROR."""


SUITES = {s.name: s for s in (
    Suite("debian", "buster", "3.7", archived=True),
    Suite("debian", "bullseye", "3.9"),
    Suite("debian", "bookworm", "3.11"),
    Suite("debian", "trixie", "3.13"),
)}
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


def _apt_mirrors() -> list[str]:
    """Debian mirror URLs this machine's apt uses (one-line ``deb URL SUITE`` and deb822 ``URIs:``), in order,
    security archives last."""
    files: list[Path] = []
    for p in APT_SOURCES:
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in (".list", ".sources"))
        elif p.is_file():
            files.append(p)
    found: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", line) or re.match(r"^URIs:\s*(.+)$", line, re.I)
            if m:
                found += [u.rstrip("/") for u in m.group(1).split() if u.startswith(("http://", "https://", "file:"))]
    seen = list(dict.fromkeys(found))
    return [u for u in seen if "security" not in u] + [u for u in seen if "security" in u]


def debian_mirror(suite: Suite) -> str:
    """Where debootstrap fetches ``suite``: ENVGEN_DEBIAN_MIRROR (ENVGEN_DEBIAN_ARCHIVE_MIRROR for an archived
    suite), else the first Debian mirror in this machine's apt sources. Never a host name written here: the
    machine's own configuration says which mirror it may reach."""
    if suite.archived and os.environ.get("ENVGEN_DEBIAN_ARCHIVE_MIRROR"):
        return os.environ["ENVGEN_DEBIAN_ARCHIVE_MIRROR"].rstrip("/")
    if os.environ.get("ENVGEN_DEBIAN_MIRROR"):
        return os.environ["ENVGEN_DEBIAN_MIRROR"].rstrip("/")
    mirrors = _apt_mirrors()
    if not mirrors:
        raise InputError("no Debian mirror configured: set ENVGEN_DEBIAN_MIRROR to a Debian mirror URL "
                          "(none found in /etc/apt/sources.list*)")
    return mirrors[0]


DEFAULT_SUITE = "bookworm"

TOOLCHAINS: dict[str, tuple[str, ...]] = {
    "node": ("nodejs", "npm"),
    "go": ("golang-go",),
    "jdk": ("default-jdk-headless", "maven", "junit4", "junit5", "testng", "libsurefire-java",
            "libmaven-compiler-plugin-java", "libmaven-resources-plugin-java"),
    "gradle": ("gradle",),
    "gcc": ("gcc", "g++", "make", "cmake", "libc6-dev", "libgtest-dev", "libgmock-dev", "catch2", "pkg-config",
            "autoconf", "automake", "libtool"),
    "php": ("php-cli", "php-xml", "php-mbstring", "composer", "phpunit"),
    "python": ("python3-venv", "python3-pytest"),
}
FAMILY_PACKAGES: dict[str, tuple[str, ...]] = {
    "code": ("git", "patch"),
}
"""Debian packages a family's image adds over the base; families not listed add none."""
FAMILY_PIP: dict[str, tuple[str, ...]] = {
    "interpreter": ("numpy==2.2.6", "pandas==2.2.3", "sympy==1.14.0", "scipy==1.15.3", "math-verify==0.9.0"),
}
"""Python packages (pinned: the tag hashes this recipe) a family's image pip-installs into the system Python;
the interpreter family's agents compute with them, and its verifier kit grades with math-verify."""

BASE_PACKAGES = ("python3", "ca-certificates")

Log = Callable[[str], None]


# ---------------------------------------------------------------- helpers


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def docker_client(client=None):
    if client is not None:
        return client
    return engine()


def image_exists(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def host_ca_bundle() -> Path | None:
    """The CA bundle this host trusts: SSL_CERT_FILE if set, else Debian's system bundle (None if neither)."""
    for cand in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


@contextlib.contextmanager
def build_lock(name: str):
    """Serialise builds of one image across processes (parallel test workers, CI jobs)."""
    path = cache_dir() / "locks" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def docker_build(client, context: bytes, tag: str, *, dockerfile: str = "Dockerfile", buildargs=None,
                  labels=None, log: Log) -> str:
    """Build a context tar with the docker SDK; return the image id. Raises BuildError with the build's tail."""
    import docker

    tail: list[str] = []
    try:
        for chunk in client.api.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True,
                                      forcerm=True, decode=True, dockerfile=dockerfile, buildargs=buildargs or {},
                                      labels=labels or {}, pull=False):
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if line.strip():
                        tail = (tail + [line])[-20:]
                        if line.startswith("Step "):
                            log(f"  {line}")
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                err = BuildError(f"building {tag} failed: {detail.strip()} (last output: {' | '.join(tail[-3:])})")
                err.tail = "\n".join(tail)  # the build's last 20 lines, for callers that report them
                raise err
    except docker.errors.APIError as e:
        raise BuildError(f"building {tag} failed: {e.explanation or e}") from None
    return client.images.get(tag).id


class BuildContext:
    """A build context assembled in memory: deterministic ownership (root) and modes (0644/0755)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w")
        self.hash = hashlib.sha256()

    def add_bytes(self, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, 0
        self.tar.addfile(info, io.BytesIO(data))
        self.hash.update(f"\0{name}\0{mode:o}\0".encode() + hashlib.sha256(data).digest())

    def add_tree(self, src: Path, prefix: str, skip: Iterable[str] = ()) -> None:
        skip = set(skip)
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(src)
            if any(part in ("__pycache__", ".git") for part in rel.parts) or rel.as_posix() in skip:
                continue
            if p.is_symlink():
                raise InputError(f"{p}: symlinks cannot go into a sandbox image; copy the file instead")
            if p.is_file():
                mode = 0o755 if os.access(p, os.X_OK) else 0o644
                self.add_bytes(f"{prefix}{rel.as_posix()}", p.read_bytes(), mode)

    def finish(self) -> tuple[bytes, str]:
        self.tar.close()
        return self.buf.getvalue(), self.hash.hexdigest()


# ---------------------------------------------------------------- base images


def _suite(suite: str) -> Suite:
    if suite not in SUITES:
        raise InputError(f"unknown suite {suite!r}; envgen builds {', '.join(SUITES)}")
    return SUITES[suite]


def _toolchains(toolchains: Iterable[str]) -> tuple[str, ...]:
    tcs = tuple(sorted(set(toolchains)))
    bad = [t for t in tcs if t not in TOOLCHAINS]
    if bad:
        raise InputError(f"unknown toolchain {bad[0]!r}; choose from {', '.join(TOOLCHAINS)}")
    return tcs


def base_recipe(suite: str = DEFAULT_SUITE, toolchains: Iterable[str] = ()) -> dict:
    """What a base image is made of; its hash is the tag, so any change here is a new image."""
    s = _suite(suite)
    ca = host_ca_bundle()
    recipe = {"v": RECIPE_VERSION, "distro": s.distro, "suite": s.name, "variant": "minbase",
              "include": list(BASE_PACKAGES),
              "ca": hashlib.sha256(ca.read_bytes()).hexdigest() if ca else None}
    tcs = _toolchains(toolchains)
    if tcs:
        recipe["toolchains"] = {t: list(TOOLCHAINS[t]) for t in tcs}
    return recipe


def base_tag(suite: str = DEFAULT_SUITE, toolchains: Iterable[str] = ()) -> str:
    """The tag build_base gives these inputs, e.g. ``envgen/base:bookworm-3f2a...`` (no build, no engine)."""
    tcs = _toolchains(toolchains)
    return f"{BASE_REPO}:{'-'.join((suite, *tcs))}-{_digest(base_recipe(suite, tcs))[:12]}"


def build_base(suite: str = DEFAULT_SUITE, toolchains: Iterable[str] = (), *, client=None, log: Log = print) -> str:
    """Build (or reuse) the base image for ``suite`` with optional toolchains; return its tag."""
    tcs = _toolchains(toolchains)
    tag = base_tag(suite, tcs)
    client = docker_client(client)
    if image_exists(client, tag):
        return tag
    with build_lock(tag):
        if image_exists(client, tag):
            return tag
        if tcs:
            core = build_base(suite, (), client=client, log=log)
            pkgs = sorted({p for t in tcs for p in TOOLCHAINS[t]})
            log(f"building {tag}: {', '.join(tcs)} ({len(pkgs)} Debian packages)")
            dockerfile = (f"FROM {core}\nUSER root\nRUN {_apt_install(pkgs)}\n")
            ctx = BuildContext()
            ctx.add_bytes("Dockerfile", dockerfile.encode())
            docker_build(client, ctx.finish()[0], tag, labels={"envgen.recipe": _digest(base_recipe(suite, tcs)),
                                                               "envgen.toolchains": ",".join(tcs)}, log=log)
        else:
            _debootstrap_import(client, _suite(suite), tag, log)
    log(f"built {tag}")
    return tag


def _apt_install(pkgs: Iterable[str]) -> str:
    return ("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
            + " ".join(pkgs) + " >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*")


def _debootstrap_import(client, suite: Suite, tag: str, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise InputError("building a base image needs debootstrap: apt-get install debootstrap "
                          "(or run .ci/setup-docker.sh)")
    if os.geteuid() != 0:
        raise InputError("building a base image runs debootstrap, which needs root; run `envgen image base` as root")
    debs = cache_dir() / "debootstrap" / suite.name
    debs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"envgen-base-{suite.name}-", dir=os.environ.get("ENVGEN_BUILD_TMP")))
    root = work / "rootfs"
    try:
        mirror = debian_mirror(suite)
        log(f"debootstrap {suite.name} (minbase + {', '.join(BASE_PACKAGES)}) from {mirror}")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "--components=main",
               f"--cache-dir={debs}", suite.name, str(root), mirror]
        if suite.archived:
            cmd.insert(1, "--no-check-gpg")  # the archive's Release files are signed with expired keys
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            lines = (out.stdout + out.stderr).strip().splitlines()
            hint = (f"; {suite.name} is archived: set ENVGEN_DEBIAN_ARCHIVE_MIRROR to a mirror of Debian's archive"
                    if suite.archived and not os.environ.get("ENVGEN_DEBIAN_ARCHIVE_MIRROR") else "")
            raise BuildError(f"debootstrap {suite.name} failed: {' | '.join(lines[-3:]) or 'no output'}{hint}")
        _install_ca(root)
        for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info"):
            p = root / junk
            if p.is_dir():
                for child in p.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        tar = work / "rootfs.tar"
        out = subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(tar), "."],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise BuildError(f"packing the {suite.name} root file system failed: {out.stderr.strip()[-300:]}")
        log(f"docker import {tag} ({tar.stat().st_size >> 20} MiB)")
        repo, _, version = tag.rpartition(":")
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
        env += [f"{k}={CA_IN_IMAGE}" for k in CA_ENV]
        changes = [f"ENV {e}" for e in env] + [
            'CMD ["/bin/bash"]', f"LABEL envgen.recipe={_digest(base_recipe(suite.name))}",
            f"LABEL envgen.suite={suite.name}", f"LABEL envgen.python={suite.python}"]
        client.api.import_image_from_file(str(tar), repository=repo, tag=version, changes=changes)
        if not image_exists(client, tag):
            raise BuildError(f"docker import of {tag} did not produce the image")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install_ca(root: Path) -> None:
    """Add the host's CA bundle to the image's trust store (idempotent: certificates already there are kept once)."""
    ca = host_ca_bundle()
    if ca is None:
        return
    pem = ca.read_text(encoding="utf-8", errors="replace")
    dest = root / HOST_CA_IN_IMAGE
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(pem, encoding="utf-8")
    bundle = root / CA_IN_IMAGE.lstrip("/")
    have = bundle.read_text(encoding="utf-8", errors="replace") if bundle.is_file() else ""
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", pem, re.S)
    extra = [b for b in blocks if b not in have]
    if extra:
        bundle.parent.mkdir(parents=True, exist_ok=True)
        with bundle.open("a", encoding="utf-8") as f:
            f.write(("" if not have or have.endswith("\n") else "\n") + "\n".join(extra) + "\n")


# ---------------------------------------------------------------- family and pack images


def parse_base(base: str) -> tuple[str, tuple[str, ...]]:
    """``debian:bookworm`` or ``debian:bookworm+node+gcc`` (or a bare suite) -> (suite, toolchains)."""
    name = base.split(":", 1)[1] if ":" in base else base
    suite, *tcs = name.split("+")
    if base.count(":") > 1 or (":" in base and base.split(":", 1)[0] != _suite(suite).distro):
        raise InputError(f"image base {base!r}: expected DISTRO:SUITE[+TOOLCHAIN...], e.g. debian:bookworm+node")
    return _suite(suite).name, _toolchains(tcs)


def _family_context(family: str, base: str) -> tuple[bytes, str]:
    pip = FAMILY_PIP.get(family, ())
    pkgs = FAMILY_PACKAGES.get(family, ()) + (("python3-pip",) if pip else ())
    install = _apt_install(pkgs) if pkgs else ""
    if pip:  # --break-system-packages: the image is the environment (PEP 668 guards a shared system Python)
        install += (" && python3 -m pip install --no-cache-dir --break-system-packages --disable-pip-version-check "
                    "--progress-bar off " + " ".join(pip) + " >/dev/null")
    lines = [f"FROM {base}", "USER root",
             f"RUN groupadd -g {SANDBOX_UID} {SANDBOX_USER} && useradd -u {SANDBOX_UID} -g {SANDBOX_UID} -M "
             f"-d /tmp -s /bin/sh {SANDBOX_USER} && mkdir -p {ENV_DIR} {WORK_DIR} {IO_DIR}"
             + (f" && {install}" if install else ""),
             f"COPY runtime/ {RUNTIME_DIR}/", f"COPY verifiers/ {VERIFIERS_DIR}/",
             f"USER {SANDBOX_UID}:{SANDBOX_UID}", f"WORKDIR {WORK_DIR}"]
    ctx = BuildContext()
    ctx.add_bytes("Dockerfile", ("\n".join(lines) + "\n").encode())
    ctx.add_tree(bundled("envs") / "runtime", "runtime/")
    ctx.add_tree(bundled("verifiers") / "envgen_verifiers", "verifiers/envgen_verifiers/")
    return ctx.finish()


def family_tag(family: str, base: str) -> str:
    """The family layer's tag over the base tag ``base`` (no build, no engine)."""
    return f"{FAMILY_REPO}:{_slug(family)[:40]}-{_family_context(family, base)[1][:12]}"


def family_image(family: str, base: str, *, client=None, log: Log = print) -> str:
    """Build (or reuse) the family layer over the base image tag ``base``; return its tag."""
    client = docker_client(client)
    context, digest = _family_context(family, base)
    tag = f"{FAMILY_REPO}:{_slug(family)[:40]}-{digest[:12]}"
    if image_exists(client, tag):
        return tag
    with build_lock(tag):
        if not image_exists(client, tag):
            log(f"building {tag}")
            docker_build(client, context, tag, labels={"envgen.family": family, "envgen.recipe": digest}, log=log)
    return tag


_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.I | re.M)
_EPILOGUE = (f"USER root\nCOPY . {ENV_DIR}/\nUSER {SANDBOX_UID}:{SANDBOX_UID}\nWORKDIR {WORK_DIR}\n")
_CONTEXT_DOCKERFILE = ".envgen.Dockerfile"


def _pack_context(pack: Pack, family_tag: str) -> tuple[bytes, str, str]:
    """(context tar, content hash, Dockerfile text): env/ at the context root, the pack's Dockerfile + epilogue."""
    env = pack.env_dir
    rel = pack.manifest.image.dockerfile
    src = (pack.root / rel) if rel else env / "Dockerfile"
    if rel and not src.is_file():
        raise InputError(f"{pack.root / 'pack.json'}: image.dockerfile {rel!r} does not exist")
    if src.is_file():
        text = src.read_text(encoding="utf-8")
        stages = _FROM.findall(text)
        if not stages or stages[-1] not in ("${ENVGEN_BASE}", "$ENVGEN_BASE"):
            raise InputError(f"{src}: the final stage must be `FROM ${{ENVGEN_BASE}}` (after `ARG ENVGEN_BASE`), "
                              "the family image envgen builds with the runtime in it")
        if not re.search(r"^\s*ARG\s+ENVGEN_BASE", text, re.I | re.M):
            text = "ARG ENVGEN_BASE\n" + text
        dockerfile = text.rstrip("\n") + "\n" + _EPILOGUE
    else:
        dockerfile = "ARG ENVGEN_BASE\nFROM ${ENVGEN_BASE}\n" + _EPILOGUE
    ctx = BuildContext()
    ignore = (env / ".dockerignore").read_text(encoding="utf-8") if (env / ".dockerignore").is_file() else ""
    ignore = (ignore.rstrip("\n") + f"\n{_CONTEXT_DOCKERFILE}\n.dockerignore\n").lstrip()
    ctx.add_bytes(".dockerignore", ignore.encode())
    ctx.add_bytes(_CONTEXT_DOCKERFILE, dockerfile.encode())
    ctx.add_tree(env, "", skip=(".dockerignore", "Dockerfile"))  # the Dockerfile's text is in the hash above
    ctx.hash.update(family_tag.encode())
    data, digest = ctx.finish()
    return data, digest, dockerfile


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "pack"


def pack_image_tag(pack: Pack) -> str:
    """The tag the pack's image has for this envgen and this env/ (no build, no engine).

    It changes with env/, the pack's Dockerfile, the runtime and verifier kit, and the base recipe, so a
    sandbox never runs an image built from other files (a stale tag in pack.json just means a build)."""
    if pack.root is None:
        raise InputError(f"pack {pack.manifest.name!r} has no directory; save it before building its image")
    suite, tcs = parse_base(pack.manifest.image.base)
    fam = family_tag(pack.manifest.family, base_tag(suite, tcs))
    return f"{PACK_REPO}:{_slug(pack.manifest.name)}-{_pack_context(pack, fam)[1][:12]}"


def ensure_pack_image(pack: Pack, *, client=None, log: Log = print, registry: str | None = None) -> tuple[str, str]:
    """Build (or reuse) the pack's image without touching the pack on disk; return (tag, image id).

    With a registry (``registry``, else ``ENVGEN_REGISTRY``) a missing image is pulled from it by its
    content-hash tag before anything is built (another node built it already)."""
    if pack.root is None:
        raise InputError(f"pack {pack.manifest.name!r} has no directory; save it before building its image")
    client = docker_client(client)
    suite, tcs = parse_base(pack.manifest.image.base)
    base = build_base(suite, tcs, client=client, log=log)
    fam = family_image(pack.manifest.family, base, client=client, log=log)
    context, digest, _ = _pack_context(pack, fam)
    tag = f"{PACK_REPO}:{_slug(pack.manifest.name)}-{digest[:12]}"
    reg = registry_of(registry)
    if not image_exists(client, tag):
        with build_lock(tag):
            if not image_exists(client, tag) and not (reg and pull_tag(client, reg, tag, log=log)):
                log(f"building {tag}")
                docker_build(client, context, tag, dockerfile=_CONTEXT_DOCKERFILE, buildargs={"ENVGEN_BASE": fam},
                              labels={"envgen.pack": pack.manifest.name, "envgen.recipe": digest}, log=log)
    return tag, client.images.get(tag).id


def build_pack_image(pack: Pack, *, client=None, log: Log = print, registry: str | None = None) -> Pack:
    """Build (or reuse) the pack's image, record tag and digest in pack.json, and return the reloaded pack.

    With a registry (``registry``, else ``ENVGEN_REGISTRY``) the image is pulled from it when it is there and
    pushed to it otherwise, and pack.json records its ``HOST:PORT/REPO@sha256:...`` reference too."""
    client = docker_client(client)
    reg = registry_of(registry)
    tag, image_id = ensure_pack_image(pack, client=client, log=log, registry=reg)
    manifest = pack.manifest.model_copy(deep=True)
    suite, tcs = parse_base(manifest.image.base)
    manifest.image.base = f"{SUITES[suite].distro}:{'+'.join((suite, *tcs))}"
    manifest.image.tag, manifest.image.digest = tag, image_id
    manifest.image.repo_digest = push(client, tag, reg, log=log) if reg else None
    return save(Pack(manifest, pack.tasks, pack.root), pack.root)


def stderr_log(msg: str) -> None:
    """A log function for library callers that must keep stdout clean (a sandbox building on first use)."""
    print(msg, file=sys.stderr, flush=True)
