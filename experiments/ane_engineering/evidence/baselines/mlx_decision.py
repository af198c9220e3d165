"""MLX FP16 baseline of the decision-model body, for paired same-session timing against the ANE path.

Scope (the same as the one Core ML call of the on-device body: one CPU -> ANE -> CPU boundary per request):

    embedding rows (looked up on the host from the checkpoint's table)
    -> embedding norm -> encoder layers (global / sliding-window attention, RoPE with the per-layer-type theta,
       GeGLU with exact erf GELU or the tanh form per config.encoder.gelu_approximation)
    -> final norm -> + token-type vectors
    -> decision-head layers (full attention, RoPE with the head theta, ReLU FFN)
    -> scorer (norm, proj + bias, ReLU, out + bias) -> one score per token -> option logits at the marker positions.

The action head, calibration and formatting stay outside, as they do for the ANE body. Batch 1. By default a
request runs exactly its n tokens (no padding, no mask on global layers); `length=L` pads to a fixed length with the
same masks as the reference (model/masks.py: only valid keys are visible; sliding layers add |q - k| <= radius;
a padded query sees every valid key), so the baseline can mirror an exported bucket.

Precision. Weights are rounded once from the FP32 checkpoint to float16; every tensor between two ops is float16.
Where MLX computes in higher precision inside an op (mlx 0.32, read from its CPU kernels and documentation):
- matmul: float16 inputs, float32 accumulation, float16 result (CPU `simd_gemm<float16, float>`; the Metal GEMM
  kernels also accumulate in float32);
- `mx.fast.layer_norm`: mean, variance and the normalisation in float32, result rounded to float16;
- `mx.fast.rope`: angle tables, cos/sin and the rotation in float32, result rounded to float16;
- `mx.fast.scaled_dot_product_attention`: Q*scale and QK^T in float16 (float32 accumulation), softmax in float32
  (documented), AV in float16 (float32 accumulation);
- elementwise ops (residual adds, GELU, ReLU, biases) are float16 in and out.

RoPE uses MLX's non-interleaved form (`traditional=False`: rotate the two halves of each head), which is
ModernBERT's `rotate_half` convention; the frequencies are passed explicitly, computed exactly as the reference
does (model/rope.py), so both sides use identical FP32 inverse frequencies.

Two variants: eager (each call builds and evaluates the graph) and `mx.compile`d (traced once per input shape and
mask pattern; a new sequence length triggers one retrace, so warm up per length before timing). `option_logits`
always ends in `mx.eval`, so a timed call includes the real computation. Attention masks for a given (n, length)
are built once and cached: the baseline gets no host-side mask cost that an MLX user would not avoid, which keeps
the ANE comparison conservative.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections import OrderedDict
from typing import Any, Iterable, Sequence

import numpy as np

from ...checkpoint.config import EncoderConfig
from ...checkpoint.tensors import HEAD_PREFIX
from ...core.errors import HarnessError
from ...model.rope import inverse_frequencies

DTYPE_NAME = "float16"
_MASK_CACHE_SIZE = 8


class BaselineInputError(HarnessError):
    """Inputs the MLX baseline refuses (never truncated, never guessed)."""


def mlx_available() -> tuple[bool, str]:
    """(True, "") when `mlx.core` imports here, else (False, why)."""
    try:
        import mlx.core  # noqa: F401
    except Exception as exc:  # ImportError, or OSError when a shared library is missing
        return False, f"mlx.core does not import: {type(exc).__name__}: {exc}"
    return True, ""


def _mx():
    ok, reason = mlx_available()
    if not ok:
        raise RuntimeError(f"the MLX baseline needs MLX ({reason}); install the 'dev' extra or `pip install mlx`")
    import mlx.core as mx
    return mx


class MLXDecisionBaseline:
    """The decision-model body in MLX, FP16 weights and activations; see the module docstring for scope."""

    def __init__(self, checkpoint, compiled: bool = False):
        checkpoint.require_head("the MLX decision baseline")
        if checkpoint.config.encoder.family != EncoderConfig.family:
            raise BaselineInputError("the MLX decision baseline implements the ModernBERT encoder; "
                                     f"{checkpoint.source} is a BERT-family encoder")
        mx = _mx()
        self.mx = mx
        self.compiled = bool(compiled)
        self.config = checkpoint.config
        enc, head = self.config.encoder, self.config.head
        self.window_radius = enc.window_radius
        self.gelu_approximation = enc.gelu_approximation
        self.eps = float(enc.norm_eps)
        t = checkpoint.tensors

        def half(name: str):
            return mx.array(t[name].detach().cpu().numpy().astype(np.float16))

        def dense(name: str) -> dict:
            # W[out, in] is stored transposed once, so every projection is x (L, in) @ W^T (in, out).
            out = {"w": mx.array(t[f"{name}.weight"].detach().cpu().numpy().T.astype(np.float16))}
            out["b"] = half(f"{name}.bias") if f"{name}.bias" in t else None
            return out

        def norm(name: str) -> dict | None:
            if f"{name}.weight" not in t:
                return None  # layer 0's identity attention norm
            return {"w": half(f"{name}.weight"), "b": half(f"{name}.bias") if f"{name}.bias" in t else None}

        def freqs(theta: float, head_dim: int):
            # mx.fast.rope takes periods and uses 1 / freqs; 1 / (1 / inv) reproduces the reference's FP32 table.
            return mx.array((1.0 / inverse_frequencies(theta, head_dim)).numpy().astype(np.float32))

        def layer(prefix: str, heads: int, theta: float, window: bool, mlp_kind: str) -> dict:
            head_dim = enc.hidden_size // heads
            return {"attn_norm": norm(f"{prefix}.attn_norm"), "Wqkv": dense(f"{prefix}.attn.Wqkv"),
                    "Wo": dense(f"{prefix}.attn.Wo"), "mlp_norm": norm(f"{prefix}.mlp_norm"),
                    "Wi": dense(f"{prefix}.mlp.Wi"), "Wo_mlp": dense(f"{prefix}.mlp.Wo"), "heads": heads,
                    "head_dim": head_dim, "freqs": freqs(theta, head_dim), "sliding": window, "mlp": mlp_kind}

        # The embedding table stays on the host (as for the ANE body): float16 rows are looked up per request.
        self._embedding_table = t["embeddings.tok_embeddings.weight"].detach().cpu().numpy().astype(np.float16)
        self._embedding_norm = norm("embeddings.norm")
        self._layers = [layer(f"layers.{n}", enc.num_attention_heads, enc.rope_theta(kind),
                              kind == "sliding_attention", "geglu")
                        for n, kind in enumerate(enc.layer_types)]
        self._final_norm = norm("final_norm")
        p = HEAD_PREFIX
        self._type_table = half(f"{p}type_embeddings.weight")
        self._head_layers = [layer(f"{p}layers.{n}", head.num_attention_heads, head.rope_theta, False, "relu")
                             for n in range(head.num_layers)]
        self._scorer_norm = norm(f"{p}scorer.norm")
        self._scorer_proj = dense(f"{p}scorer.proj")
        self._scorer_out = dense(f"{p}scorer.out")
        mx.eval([self._type_table, self._embedding_norm, self._final_norm, self._layers, self._head_layers,
                 self._scorer_norm, self._scorer_proj, self._scorer_out])
        self._masks: OrderedDict = OrderedDict()
        # Weights are captured by the closure: constants of the compiled graph, never updated.
        self._forward = mx.compile(self._graph) if self.compiled else self._graph

    # ---- graph pieces -------------------------------------------------------------------------------------------

    def _norm(self, x, params):
        if params is None:
            return x
        return self.mx.fast.layer_norm(x, params["w"], params["b"], self.eps)

    @staticmethod
    def _dense(x, params):
        y = x @ params["w"]
        return y if params["b"] is None else y + params["b"]

    def _rope(self, x, head_dim: int, freqs):
        """Non-interleaved ("rotate_half") RoPE over (1, H, L, D), positions 0..L-1."""
        return self.mx.fast.rope(x, head_dim, traditional=False, base=None, scale=1.0, offset=0, freqs=freqs)

    def _gelu(self, x):
        mx = self.mx
        if self.gelu_approximation == "tanh":
            # The tanh form; the cubic only sees |x| <= 10 (no FP16 overflow), where tanh(.) is already +-1 exactly.
            xc = mx.clip(x, -10.0, 10.0)
            inner = math.sqrt(2.0 / math.pi) * (xc + 0.044715 * (xc * xc * xc))
            return 0.5 * x * (1.0 + mx.tanh(inner))
        return 0.5 * x * (1.0 + mx.erf(x * (1.0 / math.sqrt(2.0))))

    def _attention(self, x, params, mask):
        mx = self.mx
        _, length, channels = x.shape
        heads, head_dim = params["heads"], params["head_dim"]
        qkv = self._dense(x, params["Wqkv"]).reshape(1, length, 3, heads, head_dim)  # (1, L, 3, H, D)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # (3, 1, H, L, D)
        q = self._rope(qkv[0], head_dim, params["freqs"])  # (1, H, L, D)
        k = self._rope(qkv[1], head_dim, params["freqs"])  # (1, H, L, D)
        out = mx.fast.scaled_dot_product_attention(q, k, qkv[2], scale=head_dim ** -0.5, mask=mask)  # (1, H, L, D)
        return self._dense(out.transpose(0, 2, 1, 3).reshape(1, length, channels), params["Wo"])  # (1, L, C)

    def _layer(self, x, params, full_mask, sliding_mask):
        mask = sliding_mask if params["sliding"] else full_mask
        x = x + self._attention(self._norm(x, params["attn_norm"]), params, mask)
        hidden = self._dense(self._norm(x, params["mlp_norm"]), params["Wi"])
        if params["mlp"] == "geglu":
            inp, gate = self.mx.split(hidden, 2, axis=-1)
            hidden = self._gelu(inp) * gate
        else:
            hidden = self.mx.maximum(hidden, 0.0)
        return x + self._dense(hidden, params["Wo_mlp"])

    def _graph(self, embeddings, token_types, marker_positions, full_mask, sliding_mask):
        """(1, L, C) float16 rows, (L,) int32 types, (M,) int32 markers, bool masks or None -> (M,) float16."""
        mx = self.mx
        x = self._norm(embeddings, self._embedding_norm)
        for params in self._layers:
            x = self._layer(x, params, full_mask, sliding_mask)
        x = self._norm(x, self._final_norm) + mx.take(self._type_table, token_types, axis=0)[None]
        for params in self._head_layers:
            x = self._layer(x, params, full_mask, full_mask)
        hidden = mx.maximum(self._dense(self._norm(x, self._scorer_norm), self._scorer_proj), 0.0)  # (1, L, S)
        scores = self._dense(hidden, self._scorer_out)[0, :, 0]  # (L,)
        return mx.take(scores, marker_positions, axis=0)  # (M,)

    # ---- host side ----------------------------------------------------------------------------------------------

    def masks(self, num_tokens: int, length: int):
        """(full, sliding) boolean (L, L) masks, True = visible, or None where every pair is visible."""
        key = (num_tokens, length, self.window_radius)
        if key in self._masks:
            self._masks.move_to_end(key)
            return self._masks[key]
        positions = np.arange(length)
        valid = positions < num_tokens
        full = None
        if num_tokens < length:
            full = np.broadcast_to(valid[None, :], (length, length))  # valid keys; a padded query sees them all
        near = np.abs(positions[:, None] - positions[None, :]) <= self.window_radius
        sliding = valid[None, :] & (near | ~valid[:, None])
        sliding = None if sliding.all() else sliding
        result = tuple(None if m is None else self.mx.array(np.ascontiguousarray(m)) for m in (full, sliding))
        self._masks[key] = result
        while len(self._masks) > _MASK_CACHE_SIZE:
            self._masks.popitem(last=False)
        return result

    def _inputs(self, input_ids, token_types, marker_positions, length):
        enc, head = self.config.encoder, self.config.head
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        types = np.asarray(token_types, dtype=np.int64).reshape(-1)
        markers = np.asarray(marker_positions, dtype=np.int64).reshape(-1)
        n = ids.shape[0]
        if n == 0 or types.shape[0] != n:
            raise BaselineInputError(f"input_ids ({n}) and token_types ({types.shape[0]}) must be non-empty "
                                     "and equally long")
        length = n if length is None else int(length)
        if length < n:
            raise BaselineInputError(f"{n} tokens do not fit length {length} (inputs are never truncated)")
        if length > enc.max_position_embeddings:
            raise BaselineInputError(f"length {length} exceeds max_position_embeddings {enc.max_position_embeddings}")
        if ids.min() < 0 or ids.max() >= enc.vocab_size:
            raise BaselineInputError(f"input_ids must lie in [0, {enc.vocab_size})")
        if types.min() < 0 or types.max() >= head.num_token_types:
            raise BaselineInputError(f"token_types must lie in [0, {head.num_token_types})")
        if not 0 < markers.shape[0] <= head.max_markers or markers.min() < 0 or markers.max() >= n:
            raise BaselineInputError(f"marker_positions must be 1..{head.max_markers} positions inside the {n} tokens")
        if length > n:
            ids = np.concatenate([ids, np.full(length - n, enc.pad_token_id, dtype=np.int64)])
            types = np.concatenate([types, np.zeros(length - n, dtype=np.int64)])
        rows = self.mx.array(self._embedding_table[ids][None])  # (1, L, C) float16
        return rows, self.mx.array(types.astype(np.int32)), self.mx.array(markers.astype(np.int32)), n, length

    def option_logits(self, input_ids: Sequence[int], token_types: Sequence[int], marker_positions: Sequence[int],
                      length: int | None = None) -> np.ndarray:
        """Raw option logits (float32, one per marker) of one question; evaluated with mx.eval before returning."""
        rows, types, markers, n, length = self._inputs(input_ids, token_types, marker_positions, length)
        full, sliding = self.masks(n, length)
        out = self._forward(rows, types, markers, full, sliding)
        self.mx.eval(out)
        return np.array(out.astype(self.mx.float32), dtype=np.float32)

    def describe(self) -> dict:
        mx = self.mx
        return {"backend": "mlx", "mlx_version": mx.__version__, "device": str(mx.default_device()),
                "dtype": DTYPE_NAME, "compiled": self.compiled,
                "platform": platform.platform(), "machine": platform.machine(),
                "accumulation": "float32 inside matmul, layer_norm, rope and the attention softmax; float16 elsewhere",
                "scope": "embedding rows -> encoder -> decision head -> scorer -> marker logits (batch 1)"}


# ---- variant choice -----------------------------------------------------------------------------------------------

def _fields(item: Any) -> tuple:
    """(input_ids, token_types, marker_positions) from an EncodedQuestion-like object or a tuple."""
    if hasattr(item, "input_ids"):
        return item.input_ids, item.token_types, item.marker_positions
    return tuple(item)[:3]


def _summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {"p50_ms": statistics.median(ordered), "p95_ms": p95, "mean_ms": statistics.fmean(ordered),
            "n": len(ordered)}


def choose_faster_variant(checkpoint, question_inputs: Iterable[Any], trials: int = 20, warmup: int = 3,
                          length: int | None = None) -> tuple[bool, dict]:
    """Time the eager and the compiled variant in the same session and return (compiled is faster, timings).

    `question_inputs`: EncodedQuestion objects or (input_ids, token_types, marker_positions) tuples. Each variant
    first runs every question `warmup` times (compilation, one trace per length, is excluded); then `trials` rounds
    alternate the two variants (order flipped every round, so drift hits both alike) and one sample is the wall time
    of one `option_logits` call. The variant with the lower p50 wins; a tie keeps the eager one.
    """
    questions = [_fields(q) for q in question_inputs]
    if not questions or trials < 1:
        raise BaselineInputError("choose_faster_variant needs at least one question and one trial")
    variants = {False: MLXDecisionBaseline(checkpoint, compiled=False),
                True: MLXDecisionBaseline(checkpoint, compiled=True)}
    for model in variants.values():
        for _ in range(warmup):
            for q in questions:
                model.option_logits(*q, length=length)
    samples: dict[bool, list[float]] = {False: [], True: []}
    for trial in range(trials):
        for compiled in ((False, True) if trial % 2 == 0 else (True, False)):
            model = variants[compiled]
            for q in questions:
                start = time.perf_counter()
                model.option_logits(*q, length=length)
                samples[compiled].append((time.perf_counter() - start) * 1e3)
    eager, compiled = _summary(samples[False]), _summary(samples[True])
    chosen = compiled["p50_ms"] < eager["p50_ms"]
    timings = {"eager": eager, "compiled": compiled, "chosen": "compiled" if chosen else "eager",
               "trials": trials, "warmup": warmup, "questions": len(questions), "length": length,
               "describe": variants[chosen].describe()}
    return chosen, timings
