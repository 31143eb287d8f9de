"""A pack carried back from a build worker through the store (envgen.build.distributed.unpack) is a tar a
compromised node or a tampered store row could have written: it must never write outside its destination,
and a failed unpack must leave the destination as it was."""

from __future__ import annotations

import io
import tarfile

import pytest

from envgen.build.distributed import pack_bytes, unpack


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize("members", [
    [_file("../escaped.txt")],
    [_link("env", "/etc"), _file("env/passwd", b"owned")],
    [_link("out", "../.."), _file("out/escaped.txt")],
    [_link("hard", "/etc/passwd", tarfile.LNKTYPE)],
], ids=["dotdot", "symlink-dir", "symlink-up", "hardlink-out"])
def test_a_tar_that_reaches_outside_is_refused_and_nothing_is_written(tmp_path, members):
    dest = tmp_path / "area" / "pack"
    dest.mkdir(parents=True)
    (dest / "pack.json").write_text("{}")  # an earlier pack there: kept when the new one is refused
    with pytest.raises(tarfile.TarError):
        unpack(_tar(members), dest)
    assert sorted(p.name for p in (tmp_path / "area").iterdir()) == ["pack"]  # no temp dir left behind
    assert (dest / "pack.json").read_text() == "{}"
    assert not (tmp_path / "area" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()


def test_an_absolute_name_lands_inside_the_destination(tmp_path):
    name = tmp_path / "absolute-escape.txt"  # a path the writer hopes to reach from anywhere
    out = unpack(_tar([_file(str(name), b"inside")]), tmp_path / "dest")
    assert not name.exists()
    assert (out / str(name).lstrip("/")).read_bytes() == b"inside"


def test_pack_bytes_keeps_no_owner_and_a_symlink_stays_a_link_inside(tmp_path):
    src = tmp_path / "src"
    (src / "env").mkdir(parents=True)
    (src / "env" / "a.txt").write_text("a")
    (src / "env" / "link").symlink_to("a.txt")
    with tarfile.open(fileobj=io.BytesIO(pack_bytes(src)), mode="r:gz") as tar:
        infos = {i.name: i for i in tar.getmembers()}
    assert {(i.uid, i.gid, i.uname, i.gname) for i in infos.values()} == {(0, 0, "", "")}
    assert infos["env/link"].issym() and infos["env/link"].linkname == "a.txt"
    out = unpack(pack_bytes(src), tmp_path / "out")
    assert (out / "env" / "link").is_symlink() and (out / "env" / "link").read_text() == "a"
