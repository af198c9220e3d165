"""LoRA adapters on the host: the safetensors file format, its checks, the device inputs, and merging.

File format (safetensors; nothing else is read): for every transformer layer of the exported stack, with
<layer> = `layers.<n>` for encoder layer n and `decision_head.layers.<n>` for decision-head layer n, and for every
target t of the package (q, k, v):

    <layer>.attn.<t>.lora_A   (R, C)   float32/float16/bfloat16
    <layer>.attn.<t>.lora_B   (C, R)

with metadata {"rank": "<R>", "alpha": "<alpha>", "targets": "q,v"}. The update is W_t += (alpha / R) * B @ A on the
rows of Wqkv that project to t. An adapter whose rank, alpha, targets, tensor names or shapes differ from what the
package was exported for is refused; a zero adapter (all B = 0) reproduces the base model.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ...checkpoint import Checkpoint
from ...checkpoint.config import ModelConfig
from ...checkpoint.tensors import HEAD_PREFIX
from ...core.errors import HarnessError
from ...core.json_documents import check, open_object
from ...core.limits import host_memory_bound
from ...core.regular_files import open_regular
from ...model.bc1s.attention import qk_row_order
from ...model.bc1s.lora import LoraSpec, LoraSpecError


class AdapterError(HarnessError):
    """An adapter that does not fit the package or the checkpoint."""


ADAPTER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclasses.dataclass
class Adapter:
    spec: LoraSpec
    tensors: dict[str, torch.Tensor]  # float32
    sha256: str
    name: str


def layer_prefixes(config: ModelConfig, kind: str) -> list[str]:
    """Layers of the exported stack in the order of the stacked inputs: encoder layers, then head layers (body)."""
    prefixes = [f"layers.{n}" for n in range(config.encoder.num_hidden_layers)]
    if kind == "body":
        prefixes += [f"{HEAD_PREFIX}layers.{n}" for n in range(config.head.num_layers)]
    return prefixes


def expected_shapes(config: ModelConfig, spec: LoraSpec, kind: str) -> dict[str, tuple[int, int]]:
    c, r = config.encoder.hidden_size, spec.rank
    return {f"{p}.attn.{t}.lora_{m}": ((r, c) if m == "A" else (c, r))
            for p in layer_prefixes(config, kind) for t in spec.targets for m in ("A", "B")}


def _digest(tensors: dict[str, torch.Tensor], spec: LoraSpec) -> str:
    digest = hashlib.sha256(repr(spec.to_json()).encode())
    for name in sorted(tensors):
        digest.update(name.encode() + b"\0" + tensors[name].to(torch.float32).numpy().tobytes())
    return digest.hexdigest()


def make_adapter(config: ModelConfig, spec: LoraSpec, kind: str, tensors: dict[str, torch.Tensor],
                 name: str = "in-memory") -> Adapter:
    expected = expected_shapes(config, spec, kind)
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise AdapterError(f"adapter tensors do not match the package: missing {missing[:4]}, unexpected {extra[:4]}")
    out = {}
    for key, shape in expected.items():
        value = tensors[key]
        if value.dtype not in ADAPTER_DTYPES:  # int8 would truncate small values to 0; float64 is not a format we write
            raise AdapterError(f"adapter tensor '{key}' is {str(value.dtype).removeprefix('torch.')}; adapters are "
                               f"{', '.join(str(d).removeprefix('torch.') for d in ADAPTER_DTYPES)}")
        if tuple(value.shape) != shape:
            raise AdapterError(f"adapter tensor '{key}' has shape {list(value.shape)}, expected {list(shape)} "
                               f"(rank {spec.rank})")
        value = value.to(torch.float32)
        if not torch.isfinite(value).all():
            raise AdapterError(f"adapter tensor '{key}' contains NaN or Inf")
        out[key] = value
    return Adapter(spec, out, _digest(out, spec), name)


# The safetensors metadata of an adapter file (a string -> string map, checked with the harness's JSON schemas).
ADAPTER_METADATA_SCHEMA = open_object({
    "rank": {"type": "string", "pattern": r"^[1-9][0-9]{0,4}$", "description": "a positive integer"},
    "alpha": {"type": "string", "pattern": r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$",
              "description": "a decimal number"},
    "targets": {"type": "string", "pattern": r"^[a-z]+(,[a-z]+)*$", "description": "comma-separated names"},
})


def _require_regular(path: Path) -> None:
    """An adapter is a regular file within host memory: safetensors would block on a FIFO, or map a device."""
    open_regular(path, host_memory_bound(), "LoRA adapter", error=AdapterError).close()


def read_spec(path: Path) -> LoraSpec:
    """The rank, alpha and targets an adapter file declares in its metadata."""
    _require_regular(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except Exception as error:  # not safetensors: refuse, never fall back to another loader
        raise AdapterError(f"{path}: not a readable safetensors adapter ({error})") from error
    check(metadata, ADAPTER_METADATA_SCHEMA, f"{path} metadata", AdapterError)
    try:
        return LoraSpec(int(metadata["rank"]), float(metadata["alpha"]), tuple(metadata["targets"].split(",")))
    except LoraSpecError as error:
        raise AdapterError(f"{path}: metadata must give a positive integer rank, a positive finite alpha and "
                           f"targets ({error})") from error


def load_adapter(path: Path, config: ModelConfig, spec: LoraSpec | None = None, kind: str = "body") -> Adapter:
    """Read and check an adapter file against the package's LoRA settings."""
    path = Path(path)
    _require_regular(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as error:  # not safetensors: refuse, never fall back to another loader
        raise AdapterError(f"{path}: not a readable safetensors adapter ({error})") from error
    declared = read_spec(path)
    spec = spec or declared
    if declared != spec:
        raise AdapterError(f"{path}: adapter has rank {declared.rank}, alpha {declared.alpha}, targets "
                           f"{','.join(declared.targets)}; the package takes rank {spec.rank}, alpha {spec.alpha}, "
                           f"targets {','.join(spec.targets)}")
    return make_adapter(config, spec, kind, tensors, name=path.name)


def save_adapter(path: Path, adapter: Adapter) -> None:
    metadata = {"rank": str(adapter.spec.rank), "alpha": repr(adapter.spec.alpha),
                "targets": ",".join(adapter.spec.targets)}
    save_file({k: v.contiguous() for k, v in adapter.tensors.items()}, str(path), metadata=metadata)


def random_adapter(config: ModelConfig, spec: LoraSpec, kind: str = "body", seed: int = 0,
                   scale: float = 0.05) -> Adapter:
    generator = torch.Generator().manual_seed(seed)
    tensors = {key: scale * torch.randn(shape, generator=generator)
               for key, shape in expected_shapes(config, spec, kind).items()}
    return make_adapter(config, spec, kind, tensors, name=f"random-seed{seed}")


def zero_adapter(config: ModelConfig, spec: LoraSpec, kind: str = "body") -> Adapter:
    tensors = {key: (torch.zeros(shape) if key.endswith("lora_B") else torch.ones(shape))
               for key, shape in expected_shapes(config, spec, kind).items()}
    return make_adapter(config, spec, kind, tensors, name="zero")


def _heads(config: ModelConfig, prefix: str) -> int:
    return config.head.num_attention_heads if prefix.startswith(HEAD_PREFIX) else config.encoder.num_attention_heads


def device_inputs(config: ModelConfig, adapter: Adapter, kind: str = "body") -> dict[str, np.ndarray]:
    """lora_<t>_A (1, N*R, 1, C) and lora_<t>_B (1, C, 1, N*R): B' = (alpha/R) * B in the package's row order
    (qk_row_order for Q and K; Q also times head_dim^-0.5), as the graph expects (model/bc1s/lora.py)."""
    c, spec = config.encoder.hidden_size, adapter.spec
    out = {}
    for t in spec.targets:
        a_blocks, b_blocks = [], []
        for prefix in layer_prefixes(config, kind):
            a = adapter.tensors[f"{prefix}.attn.{t}.lora_A"]  # (R, C)
            b = adapter.tensors[f"{prefix}.attn.{t}.lora_B"] * spec.scaling  # (C, R)
            heads = _heads(config, prefix)
            if t in ("q", "k"):
                b = b[qk_row_order(heads, c // heads)]
            if t == "q":
                b = b * (c // heads) ** -0.5
            a_blocks.append(a)
            b_blocks.append(b)
        out[f"lora_{t}_A"] = torch.cat(a_blocks, 0).reshape(1, -1, 1, c).numpy().astype(np.float16)  # (1, N*R, 1, C)
        out[f"lora_{t}_B"] = torch.cat(b_blocks, 1).reshape(1, c, 1, -1).numpy().astype(np.float16)  # (1, C, 1, N*R)
    return out


def merge(checkpoint: Checkpoint, adapter: Adapter, kind: str = "body") -> Checkpoint:
    """The checkpoint with W_t += (alpha/R) B A merged into Wqkv: the FP32 reference for adapter validation. Its
    weights hash names both parts, so goldens made from it are tied to this base and this adapter."""
    c = checkpoint.config.encoder.hidden_size
    tensors = dict(checkpoint.tensors)
    offsets = {"q": 0, "k": c, "v": 2 * c}
    for prefix in layer_prefixes(checkpoint.config, kind):
        key = f"{prefix}.attn.Wqkv.weight"
        weight = tensors[key].clone()
        for t in adapter.spec.targets:
            delta = (adapter.spec.scaling * adapter.tensors[f"{prefix}.attn.{t}.lora_B"]
                     @ adapter.tensors[f"{prefix}.attn.{t}.lora_A"])
            weight[offsets[t]:offsets[t] + c] += delta
        tensors[key] = weight
    merged_hash = hashlib.sha256(f"{checkpoint.weights_sha256}+lora:{adapter.sha256}".encode()).hexdigest()
    return dataclasses.replace(checkpoint, tensors=tensors, weights_sha256=merged_hash,
                               source=f"{checkpoint.source}+adapter:{adapter.name}")
