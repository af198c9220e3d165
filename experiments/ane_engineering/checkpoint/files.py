"""Reading a Hugging Face-layout directory: config.json, safetensors weights (single or sharded), hashes.

Only JSON and safetensors are ever parsed. A directory holding only pickle-based weights is refused, and a
`model.safetensors` that is not a safetensors file is refused by name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open

from ..core.json_documents import ANY_OBJECT, open_object, read_json
from ..core.limits import host_memory_bound
from ..core.regular_files import open_regular
from .config import ConfigError
from .tensors import CheckpointError

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
PICKLE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
ACCEPTED_DTYPES = {torch.float32, torch.float16, torch.bfloat16}
# model.safetensors.index.json as transformers writes it; only weight_map is read: tensor name -> a shard file
# of this directory (no path separators, so a shard cannot live elsewhere).
SHARD_NAME = {"type": "string", "pattern": r"^[^/\\]+\.safetensors$",
              "description": "a .safetensors file name in this directory"}
INDEX_SCHEMA = open_object({"weight_map": {"type": "object", "minProperties": 1, "additionalProperties": SHARD_NAME}},
                           {"metadata": {"type": "object"}})


def sha256_file(path: Path) -> str:
    """Streamed through one reused buffer (hashlib.file_digest): a GB checkpoint is never held whole. Only a regular
    file of at most host_memory_bound bytes is hashed (the harness holds every weight it hashes in memory)."""
    with open_regular(path, host_memory_bound(), "checkpoint file", error=CheckpointError) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def sha256_json(value) -> str:
    """Hash of a JSON value in canonical form (sorted keys, no whitespace)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_config_json(directory: Path) -> dict:
    """config.json parsed strictly; its fields are checked by config.parse_config."""
    path = directory / CONFIG_FILE
    if not _present(path):
        raise CheckpointError(f"{directory}: no {CONFIG_FILE}")
    return read_json(path, ANY_OBJECT, ConfigError)


def _present(path: Path) -> bool:
    """The name exists (a dangling link or a FIFO included): it is then read, and refused if it is no regular file."""
    return path.exists() or path.is_symlink()


def require_regular(path: Path) -> Path:
    """`path`, after checking it is a regular file within host memory (a FIFO or a device is refused, not read)."""
    open_regular(path, host_memory_bound(), "checkpoint file", error=CheckpointError).close()
    return path


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files holding the weights, in a fixed order; refuses pickle-only checkpoints."""
    single, index = directory / WEIGHTS_FILE, directory / WEIGHTS_INDEX
    if _present(single):
        return [require_regular(single)]
    if _present(index):
        weight_map = read_json(index, INDEX_SCHEMA, CheckpointError)["weight_map"]
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not _present(directory / s)]
        if missing:
            raise CheckpointError(f"{index}: shard(s) not found: {', '.join(missing)}")
        return [require_regular(directory / s) for s in shards]
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_WEIGHT_SUFFIXES)
    if pickles:
        raise CheckpointError(f"{directory}: weights are only in non-safetensors file(s) {', '.join(pickles)}; "
                              "this harness never loads pickle. Convert them to model.safetensors.")
    raise CheckpointError(f"{directory}: no {WEIGHTS_FILE} or {WEIGHTS_INDEX}")


def weights_sha256(files: list[Path]) -> str:
    """SHA256 of one weights file, or for shards the hash of the canonical {shard: sha256} map."""
    if len(files) == 1:
        return sha256_file(files[0])
    return sha256_json({f.name: sha256_file(f) for f in files})


def read_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    if name in shapes:
                        raise CheckpointError(f"tensor '{name}' appears in more than one shard")
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except CheckpointError:
            raise
        except Exception as error:  # safetensors raises SafetensorError / OSError on non-safetensors bytes
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
    return shapes


def all_finite(tensor: torch.Tensor) -> bool:
    """Exact, and ~20x cheaper than an elementwise check for a clean checkpoint: NaN and Inf propagate through
    addition, so a finite sum means every element is finite. Only a non-finite sum (a bad element, or finite values
    whose sum overflows) is settled element by element."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def read_tensors(files: list[Path], mapping: dict[str, str]) -> dict[str, torch.Tensor]:
    """Load the mapped tensors as float32 under their canonical names."""
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                if name not in mapping:
                    continue
                tensor = handle.get_tensor(name)
                if tensor.dtype not in ACCEPTED_DTYPES:
                    raise CheckpointError(f"tensor '{name}' has dtype {tensor.dtype}; expected float32, "
                                          "float16 or bfloat16")
                tensor = tensor.to(torch.float32)
                if not all_finite(tensor):
                    raise CheckpointError(f"tensor '{name}' contains NaN or Inf")
                tensors[mapping[name]] = tensor
    return tensors
