"""ANEAgent: the single CPU -> package -> CPU boundary of one request.

Host: tokenize, look up only the needed embedding rows, build fixed-shape additive masks, type vectors and the
one-hot marker selector. Device: one backend call running embedding norm, all encoder layers, the decision-head
layers and the scorer. Host: FP32 action head, calibration and formatting. Batch 1; requests run one after another.

Before loading anything the agent verifies each package's manifest: its own integrity hash, the source weights and
config hashes, the kind and the fixed shape against the source's dimensions, and that its package path stays inside
the package directory. Each package is then read once into a private copy whose content hash must equal the
manifest's, and the backend loads that copy (package/verified_copy.py): what runs is exactly what was verified.
A request is refused with a RequestError (never truncated, never a crash) when it cannot be run exactly as asked.
"""

from __future__ import annotations

import json
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import numpy as np

from ..checkpoint import Checkpoint
from ..core.buckets import INACTIVE_LOGIT, MARKER_SLOTS, MASK_BIAS
from ..core.errors import HarnessError
from ..model.window_tiles import AttentionLayout, LayoutError, WindowTiles
from ..package.inputs.device_inputs import DeviceInputError, body_inputs
from ..package.inputs.questions import (
    EncodedQuestion,
    Question,
    QuestionError,
    encode_question,
)
from ..package.manifest import ManifestError, package_path, read_manifest
from ..package.verified_copy import verified_copy
from .host import Decision, DecisionHost, require_finite


class PackageError(HarnessError):
    """A package this agent refuses to load."""


class RequestError(HarnessError):
    """A request this agent refuses to run."""


def verify_manifest(package_dir: Path, checkpoint: Checkpoint, kind: str = "body") -> dict:
    """Every manifest check (no package bytes read yet); returns the manifest. Local directories only."""
    package_dir = Path(package_dir)
    if not package_dir.is_dir():
        raise PackageError(f"{package_dir}: not a local package directory")
    try:
        manifest = read_manifest(package_dir)
        package_path(package_dir, manifest)
    except ManifestError as error:
        raise PackageError(str(error)) from error
    for key in ("weights_sha256", "config_sha256"):
        if manifest["source"].get(key) != checkpoint.hashes[key]:
            raise PackageError(f"{package_dir}: exported from other source {key.split('_')[0]} "
                               f"({str(manifest['source'].get(key))[:12]}...) than {checkpoint.source} "
                               f"({checkpoint.hashes[key][:12]}...)")
    if manifest.get("kind") != kind:
        raise PackageError(f"{package_dir}: kind {manifest.get('kind')!r}, this agent runs {kind!r} packages")
    if manifest.get("model_config") != json.loads(json.dumps(asdict(checkpoint.config))):
        raise PackageError(f"{package_dir}: model dimensions in the manifest do not match {checkpoint.source}")
    length, hidden = manifest.get("length"), checkpoint.config.encoder.hidden_size
    expected = {"embeddings": [1, hidden, 1, length], "global_mask": [1, length, 1, length]}
    if kind == "body":
        expected.update(type_vectors=[1, hidden, 1, length], marker_selector=[1, length, 1, MARKER_SLOTS])
    if kind == "embedding":
        expected["pooling"] = [1, length, 1, 1]
    layout = package_layout(manifest)
    if checkpoint.config.encoder.has_sliding_layers:
        tiles = layout.tiles(length, checkpoint.config.encoder.window_radius)
        expected["window_mask" if tiles else "local_mask"] = (list(tiles.mask_shape()) if tiles
                                                              else [1, length, 1, length])
    if manifest.get("lora"):
        layers = (checkpoint.config.encoder.num_hidden_layers
                  + (checkpoint.config.head.num_layers if kind == "body" else 0))
        stacked = layers * manifest["lora"]["rank"]
        for target in manifest["lora"]["targets"]:
            expected[f"lora_{target}_A"] = [1, stacked, 1, hidden]
            expected[f"lora_{target}_B"] = [1, hidden, 1, stacked]
    declared = {c["name"]: c["shape"] for c in manifest["io"]["inputs"]}
    if declared != expected:
        raise PackageError(f"{package_dir}: inputs {declared} do not match the fixed shapes {expected} of "
                           f"length {length}")
    return manifest


def package_layout(manifest: dict) -> AttentionLayout:
    """The attention layout a package was exported with (manifest "attention"; absent: dense)."""
    try:
        return AttentionLayout.from_json(manifest.get("attention"))
    except LayoutError as error:
        raise PackageError(f"manifest attention {manifest.get('attention')}: {error}") from error


@contextmanager
def verified_package(package_dir: Path, checkpoint: Checkpoint, kind: str = "body") -> Iterator[tuple[dict, Path]]:
    """(manifest, path of a private verified copy of its package): load the copy, never the directory again."""
    manifest = verify_manifest(package_dir, checkpoint, kind)
    with verified_copy(Path(package_dir), manifest) as copy:
        yield manifest, copy


def _check_window_mask(mask: np.ndarray, num_tokens: int, length: int) -> None:
    """The tile-local mask (1, W, nT, T): a valid query with no visible key, or a visible key outside the valid
    tokens (padding, or the graph's own padding beyond [0, L)), would be silently misread."""
    _, width, n_tiles, tile = mask.shape
    radius = (width - tile) // 2
    if width != tile + 2 * radius or n_tiles * tile < length or (n_tiles - 1) * tile >= length:
        raise RequestError(f"window_mask of shape {mask.shape} does not tile a bucket of {length}")
    tiles = WindowTiles(length, radius, tile)
    visible = mask[0] == 0.0  # (W, nT, T)
    keys = tiles.key_positions().numpy()[:, :, None]  # (W, nT, 1)
    if (visible & ((keys < 0) | (keys >= num_tokens))).any():
        raise RequestError("window_mask: a padding key is visible")
    queries = tiles.query_positions().numpy()  # (nT, T)
    empty = (~visible.any(axis=0)) & (queries < num_tokens)
    if empty.any():
        raise RequestError(f"window_mask: query {int(queries[empty][0])} has no valid key")


def check_shapes_and_masks(inputs: dict[str, np.ndarray], expected_shapes: dict[str, tuple], num_tokens: int) -> None:
    """Refuse inputs of the wrong names or shapes, non-finite values, and masks the graph would silently misread:
    values other than 0 and -1e4, a query with no visible key, a visible padding key."""
    if set(inputs) != set(expected_shapes):
        raise RequestError(f"device inputs {sorted(inputs)} do not match the package's {sorted(expected_shapes)}")
    for name, shape in expected_shapes.items():
        if tuple(inputs[name].shape) != tuple(shape):
            raise RequestError(f"input {name} has shape {tuple(inputs[name].shape)}, the package needs {tuple(shape)}")
        if not np.isfinite(inputs[name]).all():
            raise RequestError(f"input {name} contains NaN or Inf")
    if "window_mask" in inputs:
        if not np.isin(inputs["window_mask"], (0.0, MASK_BIAS)).all():
            raise RequestError(f"window_mask may hold only 0 and {MASK_BIAS:g}")
        _check_window_mask(inputs["window_mask"], num_tokens, inputs["global_mask"].shape[-1])
    for name in ("global_mask", "local_mask"):
        if name not in inputs:
            continue
        mask = inputs[name][0, :, 0, :]  # (Lk, Lq)
        if not np.isin(mask, (0.0, MASK_BIAS)).all():
            raise RequestError(f"{name} may hold only 0 and {MASK_BIAS:g}")
        empty = np.where((mask == 0.0).sum(axis=0) == 0)[0]
        if empty.size:
            raise RequestError(f"{name}: query {int(empty[0])} has no valid key")
        if (mask[num_tokens:, :] == 0.0).any():
            raise RequestError(f"{name}: a padding key is visible")
        if name == "global_mask" and (mask != mask[:, :1]).any():
            raise RequestError("global_mask: its query columns differ; full-attention layers read one key bias "
                               "(column 0), since every query sees exactly the valid keys")


def check_device_inputs(inputs: dict[str, np.ndarray], expected_shapes: dict[str, tuple], num_tokens: int,
                        num_options: int) -> None:
    """check_shapes_and_masks, and a selector that is one-hot on valid positions."""
    check_shapes_and_masks(inputs, expected_shapes, num_tokens)
    selector = inputs["marker_selector"][0, :, 0, :]  # (L, M)
    if not np.isin(selector, (0.0, 1.0)).all():
        raise RequestError("marker_selector must be one-hot (0/1)")
    columns = selector.sum(axis=0)
    if (columns[:num_options] != 1).any() or (columns[num_options:] != 0).any():
        raise RequestError(f"marker_selector must select exactly one position for each of {num_options} options "
                           "and nothing for inactive slots")
    if selector[num_tokens:, :].any():
        raise RequestError("marker_selector points at a padding position")


def load_packages(agent, packages: list[Path], checkpoint: Checkpoint, backend: str | None, kind: str) -> None:
    """Verify every package (one per bucket) before loading any, then load each into its own backend instance;
    sets agent.backends, manifests, load_seconds, compile_seconds (by length), lengths and backend."""
    from .backends import choose_backend

    if not packages:
        raise PackageError(f"{type(agent).__name__} needs at least one package")
    manifests = {}
    for package_dir in packages:  # check every manifest before reading any package
        manifest = verify_manifest(package_dir, checkpoint, kind)
        if manifest["length"] in manifests:
            raise PackageError(f"two packages for bucket length {manifest['length']}")
        manifests[manifest["length"]] = (Path(package_dir), manifest)
    agent.backends, agent.manifests, agent.load_seconds, agent.compile_seconds = {}, {}, {}, {}
    with ExitStack() as copies:  # verified private copies live until every backend has loaded its own
        verified = {length: copies.enter_context(verified_copy(package_dir, manifest))
                    for length, (package_dir, manifest) in manifests.items()}
        for length, (package_dir, manifest) in sorted(manifests.items()):
            runner = choose_backend(backend)  # one backend instance per loaded package
            loaded = runner.load(verified[length])
            agent.backends[length], agent.manifests[length] = runner, manifest
            agent.load_seconds[length], agent.compile_seconds[length] = loaded.load_seconds, loaded.compile_seconds
    agent.lengths = tuple(sorted(agent.backends))
    agent.backend = agent.backends[agent.lengths[0]]
    agent.package_dirs = {length: package_dir for length, (package_dir, _) in manifests.items()}


class PackageAgent:
    """What every agent does with its loaded packages (load_packages): pick a bucket, read its input contract."""

    def bucket_for(self, num_tokens: int, length: int | None = None) -> int:
        if length is not None:
            if length not in self.backends:
                raise RequestError(f"no package for bucket length {length}; loaded: {self.lengths}")
            if num_tokens > length:
                raise RequestError(f"{num_tokens} tokens do not fit bucket {length}; inputs are never truncated")
            return length
        for candidate in self.lengths:
            if num_tokens <= candidate:
                return candidate
        raise RequestError(f"{num_tokens} tokens exceed the largest bucket ({self.lengths[-1]}); inputs are "
                           "never truncated")

    def expected_shapes(self, length: int) -> dict[str, tuple]:
        return {c["name"]: tuple(c["shape"]) for c in self.manifests[length]["io"]["inputs"]}

    def layout(self, length: int) -> AttentionLayout:
        """The attention layout of the bucket's package: the host builds the masks it takes, and only those."""
        return package_layout(self.manifests[length])


class ANEAgent(PackageAgent):
    """Runs decision requests on exported body packages (several buckets: the smallest that fits is used)."""

    def predicted_crossover(self, chip: str, mlx_curve: list[tuple[int, float]] | None = None) -> dict:
        """Per loaded bucket, the predicted Neural Engine request on `chip` (the cross-chip latency model of the
        package's own program: placement/predict.py) against an MLX latency curve, and the first bucket where the
        Neural Engine is predicted slower (placement/crossover.py): a runtime can route requests longer than
        `ane_faster_up_to` away. Without `mlx_curve`, the public curve of the reference model on `chip`
        (placement/public_latencies.json); refused when the packages are not of the reference model's dimensions or
        no curve is known. A prediction."""
        from ..placement import crossover, predict, public_latencies
        from ..placement.cost_model import cost_report
        from ..placement.roofline import reference_model_mismatches

        key = predict.resolve_chips([chip])[0]
        if mlx_curve is None:
            problems = reference_model_mismatches(self.manifests[self.lengths[0]].get("model_config"))
            if problems:
                raise RequestError("no public MLX curve for this model (" + "; ".join(problems[:3])
                                   + "); pass mlx_curve")
            try:
                mlx_curve = public_latencies.mlx_curve("mmbert-base-shape", key)
            except public_latencies.PublicLatencyError as error:
                raise RequestError(str(error)) from error
        heads = self.checkpoint.config.encoder.num_attention_heads
        predicted = {length: predict.predict_cost(cost_report(self.package_dirs[length], regions=True)["cost"], [key],
                                                  heads=heads)[key]["predicted_request_ms"] for length in self.lengths}
        return {"chip": key, "label": "prediction (cross-chip latency model; not a measurement)",
                **crossover.crossover(predicted, list(mlx_curve))}

    def __init__(self, packages: list[Path], checkpoint: Checkpoint, backend: str | None = None, adapter=None):
        checkpoint.require_head("the ANEAgent")
        self.checkpoint = checkpoint
        self.tokenizer = checkpoint.require_tokenizer("the ANEAgent")
        self.host = DecisionHost(checkpoint.config.head, checkpoint.tensors)
        load_packages(self, packages, checkpoint, backend, "body")
        specs = {json.dumps(m.get("lora"), sort_keys=True) for m in self.manifests.values()}
        if len(specs) > 1:
            raise PackageError("packages disagree on their LoRA inputs; load buckets exported with the "
                               "same --lora-* flags")
        lora = self.manifests[self.lengths[0]].get("lora")
        self.lora = None
        if lora:
            from ..model.bc1s.lora import LoraSpec

            self.lora = LoraSpec(lora["rank"], lora["alpha"], tuple(lora["targets"]))
        self.adapter, self._adapter_inputs = None, {}
        self.set_adapter(adapter)

    def set_adapter(self, adapter) -> None:
        """Use `adapter` (an Adapter, a safetensors path, or None = the zero adapter) for the following calls."""
        from ..package.inputs import adapter as adapters

        if self.lora is None:
            if adapter is not None:
                raise RequestError("these packages take no LoRA inputs; export with --lora-rank to use adapters")
            return
        try:
            if adapter is None:
                adapter = adapters.zero_adapter(self.checkpoint.config, self.lora)
            elif not isinstance(adapter, adapters.Adapter):
                adapter = adapters.load_adapter(Path(adapter), self.checkpoint.config, self.lora)
            elif adapter.spec != self.lora:
                raise adapters.AdapterError(f"adapter {adapter.name} is rank {adapter.spec.rank}, alpha "
                                            f"{adapter.spec.alpha}, targets {adapter.spec.targets}; the packages take "
                                            f"{self.lora.to_json()}")
        except adapters.AdapterError as error:
            raise RequestError(str(error)) from error
        self.adapter = adapter
        self._adapter_inputs = adapters.device_inputs(self.checkpoint.config, adapter)

    def encode(self, question: Question) -> EncodedQuestion:
        try:
            return encode_question(self.tokenizer, self.checkpoint.config.head, question)
        except QuestionError as error:
            raise RequestError(str(error)) from error

    def device_inputs(self, input_ids, token_types, marker_positions, length: int) -> dict[str, np.ndarray]:
        if len(marker_positions) > MARKER_SLOTS:
            raise RequestError(f"{len(marker_positions)} options exceed the {MARKER_SLOTS} marker slots")
        try:
            inputs = body_inputs(self.checkpoint.config, self.checkpoint.tensors, input_ids, token_types,
                                 marker_positions, length, self.layout(length))
        except DeviceInputError as error:
            raise RequestError(str(error)) from error
        inputs.update(self._adapter_inputs)  # LoRA packages: the current adapter, as inputs (no recompilation)
        return inputs

    def run_device(self, inputs: dict[str, np.ndarray], length: int, num_tokens: int, num_options: int) -> np.ndarray:
        """One backend call on checked inputs; returns FP32 slot logits with inactive slots at INACTIVE_LOGIT."""
        check_device_inputs(inputs, self.expected_shapes(length), num_tokens, num_options)
        outputs = self.backends[length].predict({k: v.astype(np.float16) for k, v in inputs.items()})
        logits = np.asarray(outputs["option_logits"], dtype=np.float32).reshape(-1)
        if logits.shape != (MARKER_SLOTS,):
            raise PackageError(f"package returned option_logits of shape {logits.shape}, expected ({MARKER_SLOTS},)")
        require_finite(logits[:num_options], f"the L{length} package's option logits")  # inactive slots are unused
        logits[num_options:] = INACTIVE_LOGIT
        return logits

    def decide_encoded(self, encoded: EncodedQuestion, length: int | None = None) -> tuple[Decision, int]:
        bucket = self.bucket_for(encoded.num_tokens, length)
        inputs = self.device_inputs(encoded.input_ids, encoded.token_types, encoded.marker_positions, bucket)
        logits = self.run_device(inputs, bucket, encoded.num_tokens, len(encoded.marker_positions))
        return self.host.finish(encoded, logits), bucket

    def decide(self, question: Question, length: int | None = None, adapter=None) -> Decision:
        """Tokenization to formatted output for one question (optionally with another adapter for this call)."""
        if adapter is None:
            return self.decide_encoded(self.encode(question), length)[0]
        previous = (self.adapter, self._adapter_inputs)
        self.set_adapter(adapter)
        try:
            return self.decide_encoded(self.encode(question), length)[0]
        finally:
            self.adapter, self._adapter_inputs = previous
