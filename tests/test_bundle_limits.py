"""No bundle costs more than what it is allowed: a bundle of a few MB that expands past the limits, by its members or
by its headers, is refused in one line before anything is written, in bounded memory (measured in a child
process), and the bundles the book writes still import."""

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from vitbn_nb.store import bundle

ROOT = Path(__file__).resolve().parent.parent
#: The growth of a process's peak memory a refused bundle may cost, and what it may write (its one line of error).
MAX_GROWTH_MIB, MAX_WRITTEN = 100, 2**20


class Zeros(io.RawIOBase):
    """``size`` zero bytes, read as a stream: a bomb is written without holding it."""

    def __init__(self, size: int):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _zeros_sha256(size: int) -> str:
    digest, chunk = hashlib.sha256(), bytes(2**20)
    for start in range(0, size, len(chunk)):
        digest.update(chunk[: min(len(chunk), size - start)])
    return digest.hexdigest()


def _listing(tar: tarfile.TarFile, files: dict) -> None:
    data = json.dumps({"format": bundle.FORMAT, "files": files}).encode()
    info = tarfile.TarInfo("bundle.json")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _extension(tar: tarfile.TarFile, kind: bytes, size: int) -> None:
    """A header of type ``kind`` followed by ``size`` zero bytes of its data, then an ordinary member."""
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = kind, size
    tar.addfile(info, Zeros(size))
    tar.addfile(tarfile.TarInfo("runs/x/record.json"), io.BytesIO())


BIG = 300 * 2**20  # more than any header or file a bundle may hold, less than a test should spend making it


def write_bomb(path: Path, kind: str) -> Path:
    with gzip.open(path, "wb") as packed, tarfile.open(fileobj=packed, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        if kind == "gnu-long-name":
            _listing(tar, {})
            _extension(tar, tarfile.GNUTYPE_LONGNAME, BIG)
        elif kind == "pax-header":
            _listing(tar, {})
            _extension(tar, tarfile.XHDTYPE, BIG)
        elif kind == "listed-member":  # listed with its true size and checksum: only the limit refuses it
            name = "runs/DNN_d3-x/model.pt"
            _listing(tar, {name: {"sha256": _zeros_sha256(BIG), "bytes": BIG}})
            info = tarfile.TarInfo(name)
            info.size = BIG
            tar.addfile(info, Zeros(BIG))
        elif kind == "member-larger-than-listed":
            name = "runs/DNN_d3-x/record.json"
            _listing(tar, {name: {"sha256": "0" * 64, "bytes": 10}})
            info = tarfile.TarInfo(name)
            info.size = BIG
            tar.addfile(info, Zeros(BIG))
        elif kind == "many-folders":  # a bundle holds its listed files alone: the first folder refuses it
            _listing(tar, {})
            for i in range(bundle.MAX_FILES + 10):
                info = tarfile.TarInfo(f"runs/r{i}")
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
    return path


#: Imports the bundle sys.argv[1] into $VITBN_RUNS_DIR through the command line; prints its exit status, its error,
#: the growth of the process's peak memory (KiB) and the bytes it wrote, all measured around the import alone.
MEASURE = r"""
import contextlib, io, json, resource, sys
from vitbn_nb.__main__ import cli
from vitbn_nb.store import bundle  # imported before the baseline

def written():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar")).split()[1])

error = io.StringIO()
peak, wrote = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, written()
with contextlib.redirect_stderr(error):
    code = cli(["runs", "import", sys.argv[1]])
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
print(json.dumps({"code": code, "error": error.getvalue(), "growth_kib": growth, "written": written() - wrote}))
"""


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io to count bytes written")
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("gnu-long-name", "holds a GNU long-name header, which a bundle never has"),
        ("pax-header", f"holds a pax header of {BIG:,} bytes"),
        ("listed-member", f"lists 'runs/DNN_d3-x/model.pt' of {BIG:,} bytes"),
        ("member-larger-than-listed", "of the wrong size"),
        ("many-folders", "holds 'runs/r0', which is not a regular file"),
    ],
)
def test_a_bundle_that_expands_past_the_limits_is_refused_in_bounded_memory_writing_nothing(tmp_path, kind, expected):
    file = write_bomb(tmp_path / f"{kind}.tar.gz", kind)
    assert file.stat().st_size < 5 * 2**20  # a few MB at most
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(file)],
        cwd=ROOT,
        env={**os.environ, "VITBN_RUNS_DIR": str(store)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    assert measured["code"] == 1
    lines = measured["error"].strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "nothing was imported" in lines[0], lines
    assert measured["growth_kib"] < MAX_GROWTH_MIB * 1024, measured
    assert measured["written"] < MAX_WRITTEN, measured  # its one line of error, nothing else
    assert [p for p in store.rglob("*")] == []  # no scratch, no lock: nothing at all


def _small_listing(path: Path, files: dict[str, int]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        _listing(tar, {name: {"sha256": "0" * 64, "bytes": size} for name, size in files.items()})
    return path


def test_the_bundle_is_held_to_one_total_and_the_free_disk_before_anything_is_written(tmp_path, monkeypatch):
    store = tmp_path / "store"
    store.mkdir()
    per_file = bundle.MAX_FILE_BYTES[".pt"]
    many = {f"runs/DNN_d3-r{i}/model.pt": per_file for i in range(bundle.MAX_BYTES // per_file + 1)}
    with pytest.raises(bundle.BundleError, match=r"unpacks to 4\.\d GiB \(a bundle unpacks to at most 4 GiB\)"):
        bundle.import_bundle(_small_listing(tmp_path / "many.tar.gz", many), store=store)
    small = {"runs/DNN_d3-r0/model.pt": 10 * 2**20}
    full = type("Usage", (), {"free": 2**20})()
    monkeypatch.setattr(bundle.shutil, "disk_usage", lambda path: full)
    with pytest.raises(bundle.BundleError, match=r"unpacks to 10\.0 MiB, more than the 1\.0 MiB free.*free some space"):
        bundle.import_bundle(_small_listing(tmp_path / "small.tar.gz", small), store=store)
    assert [p.name for p in store.iterdir()] == []


def test_a_damaged_header_after_the_first_member_refuses_the_bundle_instead_of_ending_it(tmp_path):
    """tarfile takes a damaged header after the first for the end of the archive; a bundle is refused instead."""
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w") as tar:
        _listing(tar, {})
        tar.addfile(tarfile.TarInfo("runs/x/record.json"), io.BytesIO())
    data = bytearray(good.getvalue())
    data[512 * 2 + 148 : 512 * 2 + 156] = b"0000000\0"  # the second header's checksum, wrong
    file = tmp_path / "damaged.tar.gz"
    file.write_bytes(gzip.compress(bytes(data)))
    store = tmp_path / "store"
    with pytest.raises(bundle.BundleError, match="is damaged: a tar header cannot be read"):
        bundle.import_bundle(file, store=store)


def test_the_headers_the_book_writes_pass_the_survey(tmp_path):
    """tarfile writes a pax header for every file added from disk (its sub-second modification time) and for a path
    over 100 characters: small, and accepted. (A study's file: a run's record is read whole by the survey.)"""
    study = tmp_path / ("ViT-d1-" + "x" * 120)  # a study name as long as a bundle allows
    study.mkdir()
    (study / "trials.json").write_text("{}")
    name = f"runs/hpo/{study.name}/trials.json"
    file = tmp_path / "b.tar.gz"
    with tarfile.open(file, "w:gz") as tar:  # as bundle.export adds a file
        _listing(tar, {name: {"sha256": hashlib.sha256(b"{}").hexdigest(), "bytes": 2}})
        tar.add(study / "trials.json", arcname=name, recursive=False)
    raw = gzip.decompress(file.read_bytes())
    second = raw[1024:1536]  # the header after bundle.json's
    assert second[156:157] == tarfile.XHDTYPE and int(second[124:136].strip(b"\0 "), 8) <= bundle.MAX_PAX_BYTES
    assert list(bundle.survey(file, tmp_path)[0]) == [name]
