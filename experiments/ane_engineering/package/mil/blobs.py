"""weight.bin, the MIL blob storage file: its headers, read and checked without reading any weight.

Format (coremltools mlmodel/src/MILBlob/Blob/StorageFormat.hpp; written by StorageWriter.cpp): a 64-byte
storage_header (u32 count, u32 version = 2, reserved), then per blob a 64-byte blob_metadata at a 64-byte aligned
offset -- u32 sentinel 0xDEADBEEF, u32 dtype (BlobDataType.hpp), u64 sizeInBytes, u64 offset of the data,
u64 padding_size_in_bits (sub-byte types), reserved -- followed directly by the data (offset = metadata + 64); the
next metadata starts at the next 64-byte boundary after the data. A const's BlobFileValue names its metadata offset.

`read_blob_table` refuses, with one line naming the file, anything the reader would otherwise misread or crash on:
not a regular file, shorter than its header, a version other than 2, more blobs than could fit, a metadata header
past the end or without the sentinel, an unknown dtype, data that does not start right after its header or runs
past the end of the file, padding that is not less than 8 bits, and bytes after the last blob.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ...core.limits import host_memory_bound
from ...core.regular_files import open_regular
from .errors import ProgramLoadError

HEADER_BYTES = 64  # storage_header and blob_metadata are 64 bytes each
ALIGNMENT = 64
SENTINEL = 0xDEADBEEF
STORAGE_VERSION = 2
# BlobDataType code -> (MIL type name, bits per element)
DTYPES = {1: ("fp16", 16), 2: ("fp32", 32), 3: ("uint8", 8), 4: ("int8", 8), 5: ("bf16", 16), 6: ("int16", 16),
          7: ("uint16", 16), 8: ("int4", 4), 9: ("uint1", 1), 10: ("uint2", 2), 11: ("uint4", 4), 12: ("uint3", 3),
          13: ("uint6", 6), 14: ("int32", 32), 15: ("uint32", 32), 16: ("fp8e4m3fn", 8), 17: ("fp8e5m2", 8)}
CODE_OF = {name: code for code, (name, _) in DTYPES.items()}
_STORAGE = struct.Struct("<II")
_METADATA = struct.Struct("<IIQQQ")


@dataclass(frozen=True)
class Blob:
    metadata_offset: int  # what a const's BlobFileValue.offset names
    dtype: int  # BlobDataType code
    size: int  # bytes of data
    data_offset: int
    padding_bits: int

    @property
    def dtype_name(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def elements(self) -> int:
        """Elements the data holds: its bits less the padding, over the bits of one element."""
        return (self.size * 8 - self.padding_bits) // DTYPES[self.dtype][1]


def _aligned(offset: int) -> int:
    return offset + (-offset % ALIGNMENT)


def read_blob_table(path: Path) -> dict[int, Blob]:
    """{metadata offset: Blob} of a weight file, every header checked (module docstring)."""
    with open_regular(path, host_memory_bound(), "weight file", follow_links=False, error=ProgramLoadError) as handle:
        size = handle.seek(0, 2)
        handle.seek(0)
        header = handle.read(HEADER_BYTES)
        if len(header) < HEADER_BYTES:
            raise ProgramLoadError(f"{path}: {len(header)} bytes, shorter than the {HEADER_BYTES}-byte header of a "
                                   "MIL weight file (truncated)")
        count, version = _STORAGE.unpack_from(header)
        if version != STORAGE_VERSION:
            raise ProgramLoadError(f"{path}: storage version {version}; a MIL weight file is version {STORAGE_VERSION}")
        if count > (size - HEADER_BYTES) // HEADER_BYTES:
            raise ProgramLoadError(f"{path}: header declares {count} blobs, more than its {size} bytes can hold")
        table, offset = {}, HEADER_BYTES
        for _ in range(count):
            blob = _read_metadata(handle, path, offset, size)
            table[offset] = blob
            offset = _aligned(blob.data_offset + blob.size)
        end = max((b.data_offset + b.size for b in table.values()), default=HEADER_BYTES)
        if end != size:
            raise ProgramLoadError(f"{path}: {size - end} bytes after the last of its {count} blobs; the file is "
                                   "damaged or holds data no header describes")
    return table


def _read_metadata(handle, path: Path, offset: int, size: int) -> Blob:
    if offset + HEADER_BYTES > size:
        raise ProgramLoadError(f"{path}: blob header at offset {offset} lies past the end of the file ({size} bytes; "
                               "truncated)")
    handle.seek(offset)
    sentinel, dtype, nbytes, data_offset, padding = _METADATA.unpack_from(handle.read(HEADER_BYTES))
    where = f"{path}: blob at offset {offset}"
    if sentinel != SENTINEL:
        raise ProgramLoadError(f"{where} has sentinel {sentinel:#010x}, not {SENTINEL:#x} (damaged, or not a blob "
                               "header)")
    if dtype not in DTYPES:
        raise ProgramLoadError(f"{where} has dtype code {dtype}, which no MIL blob type has")
    if data_offset != offset + HEADER_BYTES:
        raise ProgramLoadError(f"{where} puts its data at offset {data_offset}; MIL blob data follows its header, "
                               f"at {offset + HEADER_BYTES}")
    if data_offset + nbytes > size:
        raise ProgramLoadError(f"{where} declares {nbytes} bytes at offset {data_offset}, past the end of the file "
                               f"({size} bytes; truncated)")
    bits = DTYPES[dtype][1]
    if bits % 8 == 0 and padding:
        raise ProgramLoadError(f"{where}: {padding} padding bits for a {DTYPES[dtype][0]} blob, which has none")
    if padding >= 8 or padding > nbytes * 8 or (nbytes * 8 - padding) % bits:
        raise ProgramLoadError(f"{where}: {padding} padding bits do not fit {nbytes} bytes of {DTYPES[dtype][0]}")
    return Blob(offset, dtype, nbytes, data_offset, padding)
