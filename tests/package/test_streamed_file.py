"""streamed_file: the written file is exactly the appended bytes, its hash is the file's, direct I/O falls back."""

from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pytest
import torch

from experiments.ane_engineering.package import streamed_file
from experiments.ane_engineering.package.streamed_file import StreamedFile


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(streamed_file, "CHUNK_BYTES", 2 * streamed_file.BLOCK)  # pieces cross many chunk boundaries


def pieces():
    generator = torch.Generator().manual_seed(0)
    yield b"\xef\xbe\xad\xde" + bytes(60)  # a header-like run of bytes
    yield torch.randn(3000, generator=generator)  # crosses a chunk boundary
    yield bytes(range(256)) * 3  # even length keeps FP16 aligned
    yield torch.randn(40, 70, generator=generator).t()  # not contiguous: written in C order of its shape
    yield torch.tensor([65504.0, 65520.0, 1e-8, -0.0, 1 / 3])  # overflow to inf, underflow, rounding, sign
    yield torch.randn(5, generator=generator).to(torch.bfloat16)
    yield b"tail"


def expected_bytes() -> bytes:
    out = b""
    with np.errstate(over="ignore"):  # 65520 rounds to inf in FP16, on purpose
        for piece in pieces():
            out += piece if isinstance(piece, bytes) else piece.float().numpy().astype(np.float16).tobytes()
    return out


def write(path) -> str:
    with StreamedFile(path) as sink:
        for piece in pieces():
            sink.write_bytes(piece) if isinstance(piece, bytes) else sink.write_fp16(piece)
        return sink.finish()


def test_the_file_is_the_appended_bytes_and_the_hash_is_the_files(tmp_path):
    digest = write(tmp_path / "w.bin")
    data = (tmp_path / "w.bin").read_bytes()
    assert data == expected_bytes()  # exact size: the block padding of the last chunk is cut
    assert digest == hashlib.sha256(data).hexdigest()


def test_an_existing_file_is_never_overwritten(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        write(tmp_path / "w.bin")
    assert (tmp_path / "w.bin").read_bytes() == b"keep"


def test_filesystems_without_direct_io_get_ordinary_writes(tmp_path, monkeypatch):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform")
    real_open = os.open

    def refuse_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")  # what tmpfs says
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse_direct)
    digest = write(tmp_path / "w.bin")
    assert (tmp_path / "w.bin").read_bytes() == expected_bytes()
    assert digest == hashlib.sha256(expected_bytes()).hexdigest()


def test_a_direct_write_refused_late_is_retried_as_an_ordinary_write(tmp_path, monkeypatch):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform")
    real_pwrite, refused = os.pwrite, []

    def refuse_first(descriptor, data, offset):
        if not refused:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", refuse_first)
    write(tmp_path / "w.bin")
    assert refused and (tmp_path / "w.bin").read_bytes() == expected_bytes()
