"""`python -m experiments.ane_engineering.encode`: the encoder's final hidden states for one input, to debug a
conversion.

Writes a float32 .npy of shape (tokens, hidden) for the valid tokens only. Backends: `reference` (the original
B x L x C FP32 model, no padding), `bc1s` (the BC1S export model in FP32 at a bucket length, with padding), and
`mil` / `mil-ane` / `coreml` (an exported `encoder`-kind package given with --package, run by the project's FP16 MIL
executor -- mil-ane: with the Neural Engine's published cliffs of --ane-family, see run/mil/cliffs.py -- or by Core ML
on macOS; the host prepares its inputs from the ids exactly as the runtime does). Compare the outputs
of several backends, or with transformers' ModernBertModel, on your own checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .checkpoint.tokenizer import content_ids
from .core.arguments import integer, refuse_unused
from .core.buckets import BUCKET_LENGTHS, buckets_within, smallest_bucket
from .core.cli import UsageError, atomic_file, run_main
from .core.limits import MAX_DIMENSION
from .core.staging import check_output
from .run.backends import BackendError, add_ane_family_argument, backend_name

BACKENDS = ("reference", "bc1s", "mil", "mil-ane", "coreml")
PACKAGE_BACKENDS = ("mil", "mil-ane", "coreml")


def parse_ids(text: str) -> list[int]:
    """Comma-separated token ids, none empty (`1,,2` is refused, not read as 1,2); repeats are ordinary text."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise UsageError(f"--ids {text!r} has an empty item; give comma-separated token ids without gaps")
    return [integer("--ids", 0)(part) for part in parts]


def input_ids_for(checkpoint, text: str | None, ids: list[int] | None) -> list[int]:
    if ids is not None:
        return ids
    tokenizer = checkpoint.require_tokenizer("--text")
    try:  # argv bytes that are not UTF-8 arrive as lone surrogates (PEP 383); they are not text
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UsageError(f"--text is not valid UTF-8 (byte 0x{ord(text[error.start]) & 0xFF:02x} at character "
                         f"{error.start})") from None
    # The tokenizer's own post-processor decides special tokens, as transformers' tokenizer would.
    return content_ids(tokenizer, text, "--text")


def adapter_inputs(checkpoint, manifest: dict, adapter_path) -> dict[str, np.ndarray]:
    """The lora_* inputs of an encoder package exported with --lora-rank: the given adapter, or the zero adapter
    (the base model). A package without LoRA inputs takes no adapter."""
    from .package.inputs import adapter as adapters

    if not manifest.get("lora"):
        if adapter_path is not None:
            raise UsageError("this package takes no LoRA inputs; export with --lora-rank to use --adapter")
        return {}
    from .model.bc1s.lora import LoraSpec

    spec = LoraSpec(manifest["lora"]["rank"], manifest["lora"]["alpha"], tuple(manifest["lora"]["targets"]))
    adapter = (adapters.zero_adapter(checkpoint.config, spec, "encoder") if adapter_path is None
               else adapters.load_adapter(adapter_path, checkpoint.config, spec, kind="encoder"))
    return adapters.device_inputs(checkpoint.config, adapter, kind="encoder")


def encode_package(checkpoint, input_ids: list[int], backend: str, package, adapter=None) -> np.ndarray:
    """Run an encoder-kind package: verify its manifest against the source, prepare inputs, one backend call."""
    from .package.inputs.device_inputs import DeviceInputError, encoder_inputs
    from .run.agent import package_layout, verified_package
    from .run.backends import choose_backend
    from .run.host import require_finite

    if package is None:
        raise UsageError(f"--backend {backend} runs an exported package: give --package DIR (an encoder-kind probe)")
    runner = choose_backend(backend)
    with verified_package(package, checkpoint, kind="encoder") as (manifest, copy):
        runner.load(copy)
    length = manifest["length"]
    try:
        # the masks of the package's attention layout (dense L x L, or tile-local for windowed sliding layers)
        inputs = encoder_inputs(checkpoint.config, checkpoint.tensors, input_ids, length, package_layout(manifest))
    except DeviceInputError as error:
        raise UsageError(str(error)) from error
    inputs.update(adapter_inputs(checkpoint, manifest, adapter))
    hidden = runner.predict({k: v.astype(np.float16) for k, v in inputs.items()})["hidden_states"]  # (1, C, 1, L)
    valid = np.asarray(hidden, dtype=np.float32)[0, :, 0, :len(input_ids)].T.copy()  # (n, C)
    cliff = runner.last_cliff()  # mil-ane: the first op where a Neural Engine cliff fired
    where = "" if cliff is None else (f" (first Neural Engine cliff at op {cliff['op']!r} ({cliff['type']}): "
                                      f"{cliff['cliff']} fired on {cliff['value']:g})")
    require_finite(valid, f"{package}: hidden states{where}")  # FP16 overflow must not become a file of NaN
    return valid


def encode(checkpoint, input_ids: list[int], backend: str, length: int | None = None, package=None,
           adapter=None) -> np.ndarray:
    """(tokens, hidden) float32 final hidden states of the valid tokens."""
    from .package.inputs.device_inputs import encoder_inputs

    enc = checkpoint.config.encoder
    if any(not 0 <= t < enc.vocab_size for t in input_ids):
        raise UsageError(f"token ids must be in [0, {enc.vocab_size})")
    if len(input_ids) > enc.max_position_embeddings:
        raise UsageError(f"{len(input_ids)} tokens: {checkpoint.source} takes at most {enc.max_position_embeddings} "
                         "(max_position_embeddings); inputs are never truncated")
    if backend.split("-")[0] in ("mil", "coreml"):  # mil, mil-ane(-family), coreml
        return encode_package(checkpoint, input_ids, backend, package, adapter)
    n = len(input_ids)
    with torch.no_grad():
        if backend == "reference":
            from .model.encoders import reference_encoder

            model = reference_encoder(checkpoint.config, checkpoint.tensors).eval()
            ids = torch.tensor([input_ids])
            return model(model.embed(ids), torch.ones_like(ids, dtype=torch.bool))[0].numpy()
        if backend == "bc1s":
            from .model.bc1s.models import bc1s_encoder

            if length is not None and length > enc.max_position_embeddings:
                raise UsageError(f"--length {length}: {checkpoint.source} takes at most {enc.max_position_embeddings} "
                                 "tokens (max_position_embeddings)")
            length = length or smallest_bucket(n, buckets_within(enc.max_position_embeddings))
            if length is None or n > length:
                raise UsageError(f"{n} tokens do not fit --length {length or max(BUCKET_LENGTHS)}; inputs are "
                                 "never truncated")
            model = bc1s_encoder(checkpoint.config, checkpoint.tensors, length).eval()
            inputs = {k: torch.from_numpy(v)
                      for k, v in encoder_inputs(checkpoint.config, checkpoint.tensors, input_ids, length).items()}
            return model(**inputs)[0, :, 0, :n].T.contiguous().numpy()  # (n, C)
    raise UsageError(f"unknown backend {backend!r}; choose from {BACKENDS}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.encode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--text", help="text to tokenize with the checkpoint's tokenizer.json")
    group.add_argument("--ids", type=parse_ids, help="comma-separated token ids, e.g. 1,72,105,2")
    parser.add_argument("--backend", choices=BACKENDS, default="reference", help="what computes the hidden states")
    parser.add_argument("--length", type=integer("--length", 1, MAX_DIMENSION, "a bucket length is a tensor axis of "
                                                 f"the export; Core ML loads none above {MAX_DIMENSION}"),
                        help="bucket length for --backend bc1s (default: smallest of %s that fits)" % (BUCKET_LENGTHS,))
    add_ane_family_argument(parser)
    parser.add_argument("--package", type=Path, help="encoder-kind probe output for --backend mil|mil-ane|coreml")
    parser.add_argument("--adapter", type=Path, help="LoRA adapter (safetensors) for an encoder package exported "
                        "with --lora-rank (default: the zero adapter, i.e. the base model)")
    parser.add_argument("--output", required=True, help="new .npy file (refused if it exists)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    refuse_unused(args, {
        **({} if args.backend == "bc1s" else {"length": f"by --backend {args.backend} (only bc1s takes a bucket "
                                                       "length; a package has its own)"}),
        **({} if args.backend in PACKAGE_BACKENDS else {
            "package": f"by --backend {args.backend} (only mil and coreml run a package)",
            "adapter": f"by --backend {args.backend} (only a LoRA package run by mil or coreml takes one)"}),
    })
    try:
        backend = backend_name(args.backend, args.ane_family)
    except BackendError as error:
        raise UsageError(str(error)) from None
    check_output(args.output, [args.package, args.adapter, local_source_directory(args.source)])
    checkpoint = load_checkpoint(args.source)
    hidden = encode(checkpoint, input_ids_for(checkpoint, args.text, args.ids), backend, args.length, args.package,
                    args.adapter)
    with atomic_file(args.output) as temporary:
        with open(temporary, "wb") as handle:
            np.save(handle, hidden.astype(np.float32))
    print(f"wrote {args.output}: {hidden.shape[0]} tokens x {hidden.shape[1]} hidden, float32 ({args.backend})")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
