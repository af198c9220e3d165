"""The program a prediction counts: a package on disk, or the export a source (or a bare config) would produce.

- A package directory (probe output, or an .mlpackage): its MIL program is read and counted as it is.
- `--source S --kind K --length L [--attention ...]`: the checkpoint is loaded and converted exactly as
  `probe` exports it (package/kinds.py build_export_spec, package/convert.py convert: the same module, trace and
  pass pipeline); the converted program is counted without writing a package. `--attention auto` (probe's default)
  decides the layout as probe does (workflows/attention_choice.py).
- `--config NAME|FILE`: a Hugging Face config.json (or a named config of placement/public_latencies.json) with no
  weights. The cost of a program depends on its op graph, shapes and dtypes, not on weight values, so the tensors
  the config names are drawn at random (fixed seed, no two equal, so no constant is merged by coincidence) and the
  result is the same program a checkpoint of that config would export. The embedding table, which stays on the
  host, is not drawn.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import Checkpoint, load_checkpoint
from ..checkpoint.config import parse_config
from ..checkpoint.tensors import expected_tensors, require_host_memory
from ..core.errors import HarnessError
from ..core.json_documents import read_json
from ..model.window_tiles import DEFAULT_TILE
from ..placement.cost_model import program_cost
from ..placement.regions import program_regions
from .attention_choice import CHOICES as PROBE_CHOICES
from .attention_choice import choose_layout, requested_layout

ATTENTION_CHOICES = ("dense", "windowed", "reference-run", "auto")
PUBLIC_LATENCIES = Path(__file__).resolve().parent.parent / "placement" / "public_latencies.json"
HOST_TABLES = ("embeddings.tok_embeddings.weight", "embeddings.word_embeddings.weight")
CONFIG_SEED = 0


class PredictInputError(HarnessError):
    """A package or export description predict cannot count."""


def named_configs() -> dict[str, dict]:
    """The named configs of placement/public_latencies.json: {name: raw config.json}."""
    document = read_json(PUBLIC_LATENCIES, {"type": "object", "required": ["configs"]})
    return {name: entry["config"] for name, entry in document["configs"].items()}


def config_checkpoint(spec: str) -> Checkpoint:
    """A weightless checkpoint of a config: a named config or a config.json path; tensors drawn at random."""
    configs = named_configs()
    if spec in configs:
        raw, where = configs[spec], f"{PUBLIC_LATENCIES.name} configs.{spec}"
    else:
        path = Path(spec)
        if not path.is_file():
            raise PredictInputError(f"--config {spec!r}: neither a named config ({', '.join(configs)}) nor a file")
        raw, where = read_json(path, {"type": "object"}), str(path)
    config = parse_config(raw, where)
    require_host_memory(config, where)
    rng = np.random.Generator(np.random.PCG64(CONFIG_SEED))
    tensors = {}
    for name, shape in sorted(expected_tensors(config).items()):
        if name in HOST_TABLES:
            tensors[name] = torch.zeros((0, shape[1]))  # stays on the host: never part of a device program
            continue
        scale = 1.0 / np.sqrt(shape[-1]) if len(shape) > 1 else 0.1
        value = rng.standard_normal(shape, dtype=np.float32) * scale + (1.0 if name.endswith("norm.weight") else 0.0)
        tensors[name] = torch.from_numpy(value.astype(np.float32))
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    return Checkpoint(source=f"config:{spec}", directory=Path("."), config=config, raw_config=raw, tensors=tensors,
                      tokenizer=None, weights_sha256=digest, config_sha256=digest, tokenizer_sha256=None)


def _layout(choice: str, tile: int):
    if choice == "reference-run":
        from ..model.window_tiles import reference_run_layout

        return reference_run_layout()
    return requested_layout(choice, tile)


def export_cost(checkpoint: Checkpoint, kind: str, length: int, attention: str = "auto",
                tile: int = DEFAULT_TILE) -> tuple[dict, dict]:
    """(program_cost of the program probe would export, description of it). Converts once (twice for auto with
    sliding layers: both layouts, as probe does)."""
    from ..package.convert import convert
    from ..package.kinds import ExportSpecError, build_export_spec

    if attention not in ATTENTION_CHOICES:
        raise PredictInputError(f"--attention must be one of {ATTENTION_CHOICES}, got {attention!r}")
    try:
        if attention == "auto":
            layout, record, model = choose_layout(
                checkpoint, kind, length, tile,
                build=lambda lay: build_export_spec(checkpoint, kind, length, attention=lay), convert=convert)
            if model is None:
                model = convert(build_export_spec(checkpoint, kind, length, attention=layout))
        else:
            layout, record = _layout(attention, tile), {"requested": attention}
            model = convert(build_export_spec(checkpoint, kind, length, attention=layout))
    except ExportSpecError as error:
        raise PredictInputError(str(error)) from error
    cost = program_cost(model._mil_program, length)
    cost["regions"] = program_regions(model._mil_program)
    description = {"what": "the program probe would export (converted here, not written)",
                   "source": checkpoint.source, "kind": kind, "length": length,
                   "attention": {**record, "layout": layout.name, "tile": layout.tile},
                   "model_config_sha256": checkpoint.config_sha256}
    return cost, description


def model_dims(config) -> dict:
    """The encoder dimensions public points are matched on (placement/public_latencies.py DIMENSIONS)."""
    encoder = config.encoder
    return {"hidden_size": encoder.hidden_size, "num_hidden_layers": encoder.num_hidden_layers,
            "num_attention_heads": encoder.num_attention_heads, "intermediate_size": encoder.intermediate_size}


def source_cost(source: str | None, config: str | None, kind: str | None, length: int, attention: str = "auto",
                tile: int = DEFAULT_TILE) -> tuple[dict, dict]:
    """(cost, description) of the export of a source or a bare config; `kind` None is the body when the checkpoint
    has a decision head, else the encoder (a plain BERT or ModernBERT config)."""
    checkpoint = config_checkpoint(config) if config else load_checkpoint(source)
    if kind is None:
        kind = "body" if checkpoint.config.head is not None else "encoder"
    cost, description = export_cost(checkpoint, kind, length, attention, tile)
    return cost, {**description, "model_dims": model_dims(checkpoint.config)}


def package_cost(directory: Path) -> tuple[dict, dict]:
    """(program_cost, description) of a package on disk (probe directory or .mlpackage)."""
    from ..placement.cost_model import cost_report

    directory = Path(directory)
    if not directory.exists():
        raise PredictInputError(f"--package {directory}: no such directory")
    report = cost_report(directory, regions=True)
    manifest = report.get("manifest") or {}
    encoder = (manifest.get("model_config") or {}).get("encoder") or {}
    dims = {name: encoder.get(name) for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                 "intermediate_size")}
    description = {"what": "a package on disk", "package": str(directory), "kind": manifest.get("kind"),
                   "length": report["cost"]["length"], "package_sha256": manifest.get("package_sha256"),
                   "source": (manifest.get("source") or {}).get("source"),
                   "model_dims": dims if all(dims.values()) else None}
    return report["cost"], description


__all__ = ["ATTENTION_CHOICES", "PROBE_CHOICES", "PredictInputError", "config_checkpoint", "export_cost",
           "model_dims", "named_configs", "package_cost", "source_cost"]
