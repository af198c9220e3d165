"""A large write-once file, streamed in aligned chunks and hashed as it is written (used by reweight).

Bytes and FP16 casts of tensors are appended into a few reused, page-aligned chunk buffers; while the next chunk
fills, one thread hashes each full chunk (in order) and another writes it at its offset (hashlib and os.pwrite
release the GIL). Where the OS allows,
the file bypasses the page cache (O_DIRECT on Linux, F_NOCACHE on macOS): the file is never read back by the writer,
and first-touching fresh page cache for a large file costs several times a direct write of the same bytes (the
reweight benchmark, benchmarks/reweight_vs_export.py, times both paths). Filesystems that refuse direct I/O (tmpfs) get
ordinary writes. The SHA256 covers exactly the bytes of the finished file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

CHUNK_BYTES = 8 << 20  # multiple of every block size direct I/O asks for
RING = 3  # chunks in flight: one filling, up to two hashing/writing
BLOCK = 4096  # direct I/O: offsets and lengths in whole blocks; the last one is padded, then the file truncated


def _open_uncached(path: Path) -> tuple[int, bool]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    if hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o666), True
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
    descriptor = os.open(path, flags, 0o666)
    if hasattr(fcntl, "F_NOCACHE"):  # macOS
        fcntl.fcntl(descriptor, fcntl.F_NOCACHE, 1)
    return descriptor, False


class StreamedFile:
    """with StreamedFile(path) as out: out.write_bytes(b); out.write_fp16(tensor); ...; sha256 = out.finish()"""

    def __init__(self, path: Path):
        import torch

        self.path = Path(path)
        self.descriptor, self.direct = _open_uncached(self.path)
        self.chunks = [mmap.mmap(-1, CHUNK_BYTES) for _ in range(RING)]  # page-aligned, reused
        self.halves = [torch.frombuffer(chunk, dtype=torch.float16) for chunk in self.chunks]  # fp16 views
        self.pending: list[tuple[Future, Future] | None] = [None] * RING
        self.hasher = ThreadPoolExecutor(max_workers=1)  # one worker: chunks are hashed in file order
        self.writer = ThreadPoolExecutor(max_workers=1)
        self.digest = hashlib.sha256()
        self.current, self.fill, self.size = 0, 0, 0

    def __enter__(self) -> "StreamedFile":
        return self

    def __exit__(self, *exc) -> None:
        self.hasher.shutdown(wait=True)
        self.writer.shutdown(wait=True)
        os.close(self.descriptor)
        self.halves = self.chunks = self.pending = None  # the tensors view the chunks: unmapped when both are gone

    def write_bytes(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            count = min(len(view), CHUNK_BYTES - self.fill)
            self.chunks[self.current][self.fill:self.fill + count] = view[:count]
            self._advance(count)
            view = view[count:]

    def write_fp16(self, tensor) -> None:
        """Append the tensor cast to FP16 in C order (round to nearest even, as coremltools and numpy do)."""
        flat = tensor.reshape(-1)
        done = 0
        while done < flat.numel():
            if self.fill % 2:
                raise ValueError("FP16 data must start at an even offset")
            start = self.fill // 2
            count = min(flat.numel() - done, (CHUNK_BYTES - self.fill) // 2)
            self.halves[self.current][start:start + count].copy_(flat[done:done + count])
            self._advance(2 * count)
            done += count

    def finish(self) -> str:
        """Write what is left, wait for every chunk, cut the padding; the SHA256 of the file."""
        if self.fill:
            self._submit(final=True)
        for futures in self.pending:
            for future in futures or ():
                future.result()
        os.ftruncate(self.descriptor, self.size)
        return self.digest.hexdigest()

    def _advance(self, count: int) -> None:
        self.fill += count
        self.size += count
        if self.fill == CHUNK_BYTES:
            self._submit(final=False)

    def _submit(self, final: bool) -> None:
        index, length = self.current, self.fill
        offset = self.size - length
        padded = length if not final else -(-length // BLOCK) * BLOCK
        self.chunks[index][length:padded] = bytes(padded - length)
        view = memoryview(self.chunks[index])
        self.pending[index] = (self.hasher.submit(self.digest.update, view[:length]),
                               self.writer.submit(self._write, view[:padded], offset))
        self.current = (index + 1) % RING
        self.fill = 0
        for future in self.pending[self.current] or ():
            future.result()  # its bytes must be hashed and written before the chunk is refilled

    def _write(self, view: memoryview, offset: int) -> None:
        while len(view):
            try:
                written = os.pwrite(self.descriptor, view, offset)
            except OSError as error:  # a filesystem that accepted O_DIRECT at open but not on write
                if error.errno != errno.EINVAL or not self.direct:
                    raise
                fcntl.fcntl(self.descriptor, fcntl.F_SETFL, fcntl.fcntl(self.descriptor, fcntl.F_GETFL) & ~os.O_DIRECT)
                self.direct = False
                continue
            view, offset = view[written:], offset + written
