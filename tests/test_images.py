"""Image recipes: tags are content hashes, present images are reused, hidden/ never enters an image."""

from __future__ import annotations

import io
import json
import tarfile

import docker
import pytest

from envgen.sandbox import images
from envgen.pack import format as packmod
from envgen.errors import EnvgenError


class _FakeImages:
    def __init__(self, present: set[str]):
        self.present = present

    def get(self, tag):
        if tag not in self.present:
            raise docker.errors.ImageNotFound(tag)
        return type("Image", (), {"id": "sha256:" + "0" * 64})()


class _FakeClient:
    def __init__(self, present=()):
        self.images = _FakeImages(set(present))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))


def test_base_tag_is_a_content_hash_of_the_recipe(tmp_path, monkeypatch):
    tag = images.base_tag()
    assert tag == images.base_tag("bookworm", ()) and tag.startswith("envgen/base:bookworm-")
    assert images.base_tag("bookworm", ["node", "go"]) == images.base_tag("bookworm", ("go", "node", "go"))
    assert images.base_tag("bookworm", ["node", "go"]).startswith("envgen/base:bookworm-go-node-")
    assert len({images.base_tag(s) for s in ("bullseye", "bookworm", "trixie")}) == 3
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    other = images.base_tag()
    assert other != tag, "the host CA bundle is part of the recipe"
    ca.write_text(ca.read_text() + "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n")
    assert images.base_tag() != other


def test_the_debian_mirror_comes_from_the_machines_apt_sources_or_the_environment(tmp_path, monkeypatch):
    lists = tmp_path / "sources.list.d"
    lists.mkdir()
    (tmp_path / "sources.list").write_text("# deb http://commented.invalid/debian bookworm main\n"
                                           "deb [arch=amd64 signed-by=/k.gpg] http://security.invalid/debian-security "
                                           "bookworm-security main\n")
    (lists / "debian.sources").write_text("Types: deb\nURIs: http://mirror.invalid/debian/\nSuites: bookworm\n"
                                          "Components: main\n")
    (lists / "other.list.disabled").write_text("deb http://disabled.invalid/debian bookworm main\n")
    monkeypatch.setattr(images, "APT_SOURCES", (tmp_path / "sources.list", lists))
    monkeypatch.delenv("ENVGEN_DEBIAN_MIRROR", raising=False)
    monkeypatch.delenv("ENVGEN_DEBIAN_ARCHIVE_MIRROR", raising=False)
    assert images._apt_mirrors() == ["http://mirror.invalid/debian", "http://security.invalid/debian-security"]
    assert images.debian_mirror(images.SUITES["bookworm"]) == "http://mirror.invalid/debian"
    monkeypatch.setenv("ENVGEN_DEBIAN_MIRROR", "http://env.invalid/debian/")
    assert images.debian_mirror(images.SUITES["bookworm"]) == "http://env.invalid/debian"
    monkeypatch.setenv("ENVGEN_DEBIAN_ARCHIVE_MIRROR", "http://archive.invalid/debian")
    assert images.debian_mirror(images.SUITES["buster"]) == "http://archive.invalid/debian"
    assert images.debian_mirror(images.SUITES["bookworm"]) == "http://env.invalid/debian"
    tag = images.base_tag()
    monkeypatch.setenv("ENVGEN_DEBIAN_MIRROR", "http://elsewhere.invalid/debian")
    assert images.base_tag() == tag, "where the packages come from is not what the image is"
    monkeypatch.delenv("ENVGEN_DEBIAN_MIRROR")
    monkeypatch.setattr(images, "APT_SOURCES", (tmp_path / "none",))
    with pytest.raises(EnvgenError, match="ENVGEN_DEBIAN_MIRROR"):
        images.debian_mirror(images.SUITES["bookworm"])


def test_unknown_suites_and_toolchains_are_one_clear_error():
    with pytest.raises(EnvgenError, match="unknown suite 'sid'.*buster, bullseye, bookworm, trixie"):
        images.base_tag("sid")
    with pytest.raises(EnvgenError, match="unknown toolchain 'rust'"):
        images.build_base("bookworm", ["rust"], client=_FakeClient())


@pytest.mark.parametrize("base, expected", [
    ("debian:bookworm", ("bookworm", ())),
    ("bookworm", ("bookworm", ())),
    ("debian:trixie+node+gcc", ("trixie", ("gcc", "node"))),
    ("debian:bullseye+go", ("bullseye", ("go",))),
])
def test_parse_base(base, expected):
    assert images.parse_base(base) == expected


@pytest.mark.parametrize("base", ["ubuntu:bookworm", "debian:sid", "debian:bookworm+rust", "a:b:c"])
def test_parse_base_rejects(base):
    with pytest.raises(EnvgenError):
        images.parse_base(base)


def test_present_base_is_reused_never_rebuilt(monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("a present image must not be rebuilt")

    monkeypatch.setattr(images.subprocess, "run", no_build)
    monkeypatch.setattr(images, "docker_build", no_build)
    tag = images.base_tag("bookworm", ["node"])
    assert images.build_base("bookworm", ["node"], client=_FakeClient({tag}), log=no_build) == tag


def test_missing_base_without_debootstrap_says_how_to_fix(monkeypatch):
    monkeypatch.setattr(images.shutil, "which", lambda name: None)
    with pytest.raises(EnvgenError, match="needs debootstrap: apt-get install debootstrap"):
        images.build_base("bookworm", client=_FakeClient(), log=lambda m: None)


def test_ca_bundle_is_installed_once(tmp_path, monkeypatch):
    ca = tmp_path / "host.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nHOST\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    root = tmp_path / "rootfs"
    bundle = root / "etc/ssl/certs/ca-certificates.crt"
    bundle.parent.mkdir(parents=True)
    bundle.write_text("-----BEGIN CERTIFICATE-----\nDEBIAN\n-----END CERTIFICATE-----\n")
    images._install_ca(root)
    images._install_ca(root)
    text = bundle.read_text()
    assert text.count("HOST") == 1 and text.count("DEBIAN") == 1
    assert (root / images.HOST_CA_IN_IMAGE).read_text() == ca.read_text()


def _context_names(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_pack_context_hashes_env_and_dockerfile_only(tiny_pack, tmp_path):
    data, digest, dockerfile = images._pack_context(tiny_pack, "envgen/family:test-1")
    files = _context_names(data)
    assert "tools.py" in files and "state/kv.db" in files and not any("verify" in n for n in files)
    assert dockerfile.startswith("ARG ENVGEN_BASE\nFROM ${ENVGEN_BASE}\n") and "COPY . /env/" in dockerfile
    assert images._pack_context(tiny_pack, "envgen/family:test-1")[1] == digest
    assert images._pack_context(tiny_pack, "envgen/family:test-2")[1] != digest, "a new family layer, a new tag"
    (tiny_pack.hidden_dir / "verify.py").write_text("def verify():\n    return 0\n")
    fewer = tiny_pack.with_tasks(tiny_pack.tasks[:1])
    assert images._pack_context(fewer, "envgen/family:test-1")[1] == digest, "tasks and hidden/ are not in the image"
    (tiny_pack.env_dir / "notes.txt").write_text("x")
    assert images._pack_context(tiny_pack, "envgen/family:test-1")[1] != digest


def test_pack_dockerfile_must_build_on_the_family_image(tiny_pack):
    (tiny_pack.env_dir / "Dockerfile").write_text("FROM python:3.12\nRUN true\n")
    with pytest.raises(EnvgenError, match=r"Dockerfile: the final stage must be `FROM \$\{ENVGEN_BASE\}`"):
        images._pack_context(tiny_pack, "envgen/family:test-1")
    (tiny_pack.env_dir / "Dockerfile").write_text("FROM $ENVGEN_BASE\nUSER root\nRUN echo hi > /opt/marker\n")
    _, _, dockerfile = images._pack_context(tiny_pack, "envgen/family:test-1")
    assert dockerfile.startswith("ARG ENVGEN_BASE\nFROM $ENVGEN_BASE\n") and dockerfile.endswith("WORKDIR /work\n")
    multi = ("FROM golang:1.22 AS build\nRUN go version\n"
             "FROM ${ENVGEN_BASE}\nCOPY --from=build /usr/local/go/VERSION /opt/\n")
    (tiny_pack.env_dir / "Dockerfile").write_text(multi)
    assert images._pack_context(tiny_pack, "envgen/family:test-1")[2].startswith("ARG ENVGEN_BASE\n" + multi)


# ---------------------------------------------------------------- real builds (the base image is built once)


@pytest.mark.docker
def test_build_pack_image_records_tag_and_digest_and_reuses(docker_tiny_pack, monkeypatch):
    from envgen.sandbox.docker import engine

    img = docker_tiny_pack.manifest.image
    assert img.base == "debian:bookworm" and img.tag.startswith("envgen/pack:tiny-")
    assert img.digest == engine().images.get(img.tag).id
    on_disk = json.loads((docker_tiny_pack.root / "pack.json").read_text())["image"]
    assert on_disk["tag"] == img.tag and on_disk["digest"] == img.digest
    packmod.verify_hash(docker_tiny_pack)  # recording the image does not change what the pack is

    def no_build(*a, **k):
        raise AssertionError("present layers must be reused")

    monkeypatch.setattr(images, "docker_build", no_build)
    monkeypatch.setattr(images.subprocess, "run", no_build)
    again = images.build_pack_image(docker_tiny_pack, log=lambda m: None)
    assert again.manifest.image == img and again.manifest.version == docker_tiny_pack.manifest.version
    assert images.pack_image_tag(docker_tiny_pack) == img.tag, "the tag is computable without an engine"


@pytest.mark.docker
def test_a_stale_image_tag_is_never_run(docker_tiny_pack, tmp_path):
    from envgen.sandbox.docker import DockerSandbox

    edited = packmod.save(docker_tiny_pack, tmp_path / "edited")
    (edited.env_dir / "notes.txt").write_text("new in env/")
    edited = packmod.save(edited, edited.root)
    assert edited.manifest.image.tag == docker_tiny_pack.manifest.image.tag  # pack.json still names the old image
    with DockerSandbox(edited) as sbx:  # builds the image of the current env/, reusing the lower layers
        sbx.reset()
        assert "/env/notes.txt" in json.loads(sbx.call("find_file", {"name": "notes.txt"}).content)
    assert images.pack_image_tag(edited) != docker_tiny_pack.manifest.image.tag


@pytest.mark.docker
def test_base_image_trusts_the_host_ca_bundle(docker_tiny_pack):
    from envgen.sandbox.docker import engine

    host = images.host_ca_bundle().read_text()
    script = "cat $SSL_CERT_FILE; python3 -c 'import sys; print(sys.version)'"
    out = engine().containers.run(images.base_tag(), ["sh", "-c", script], remove=True, network_mode="none").decode()
    certs = [b for b in host.split("-----END CERTIFICATE-----") if "BEGIN" in b]
    assert all(c.strip() in out for c in certs), "every host CA is in the image's bundle"
    assert "\n3.11." in "\n" + out.splitlines()[-1]


@pytest.mark.docker
def test_custom_dockerfile_layer_is_built_and_used(tiny_pack, docker_tiny_pack):
    from envgen.sandbox.docker import DockerSandbox

    (tiny_pack.env_dir / "Dockerfile").write_text(
        "ARG ENVGEN_BASE\nFROM ${ENVGEN_BASE}\nUSER root\nRUN mkdir -p /opt/extra && echo hi > /opt/extra/marker\n")
    manifest = tiny_pack.manifest.model_copy(update={"image": docker_tiny_pack.manifest.image.model_copy(
        update={"tag": None, "digest": None})})
    custom = packmod.save(packmod.Pack(manifest, tiny_pack.tasks, tiny_pack.root), tiny_pack.root)
    built = images.build_pack_image(custom, log=lambda m: None)
    assert built.manifest.image.tag not in (None, docker_tiny_pack.manifest.image.tag)
    with DockerSandbox(built) as sbx:
        sbx.reset()
        assert json.loads(sbx.call("find_file", {"name": "marker"}).content) == ["/opt/extra/marker"]
        for name in ("Dockerfile", ".envgen.Dockerfile", ".dockerignore"):
            assert json.loads(sbx.call("find_file", {"name": name}).content) == [], f"no {name} in the image"
