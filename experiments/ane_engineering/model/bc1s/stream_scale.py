"""The exact FP16 rescaling of the residual stream: a BC1S encoder whose stream is 2^-K times the original, with the
same output (ANE_MATH.md section 17).

LayerNorm(s x; s^2 eps) = LayerNorm(x; eps) for any s > 0: the mean and the deviations scale by s, the variance and
the epsilon by s^2, so their ratio does not change. With s = 2^-K every one of these scalings is exact in binary
floating point (no mantissa changes) while no value leaves the normal range, so the rescaled graph computes in FP32
what the original computes, only with the stream's magnitude 2^K times smaller, and in FP16 it rounds the same
mantissas at a smaller exponent: the values that would meet an FP16 or Neural Engine cliff are moved away from it.

Pre-norm ModernBERT (BC1SEncoder), x -> x + f(norm(x)):
    embedding norm           weight (and bias) * s            the stream entering layer 0 is s x
    layer 0's Q, K, V        weights * 1/s (biases unchanged) it reads the stream directly (identity attention norm)
    attention output Wo      weight and bias * s              every residual-writing projection writes s f
    MLP output Wo            weight and bias * s
    attention / MLP norms    epsilon * s^2                    they read s x: their outputs are unchanged
    final norm               epsilon * s^2                    its output (the encoder's) is unchanged
Post-norm BERT (BC1SBertEncoder), x -> norm(x + f(x)): the sums its norms read carry s.
    embedding norm and every layer norm but the last   weight and bias * s   (each output is the next stream)
    Q, K, V and the FFN input projection               weights * 1/s         (they read s x)
    attention output and FFN output projections        weight and bias * s
    every layer norm                                   epsilon * s^2         (they read s (x + f(x)))
The decision head reads the final norm's (BERT: the last layer norm's) unchanged output, so it is not touched.

`scaled_epsilons` says what each epsilon becomes in FP32 and in the package's FP16, and refuses an exponent for which
the identity would no longer hold (see its docstring).
"""

from __future__ import annotations

import math

import numpy as np
from torch import nn

from ..layers import ModelInputError
from .bert import BC1SBertEncoder
from .conv import Conv1x1
from .models import BC1SEncoder
from .norm import ChannelLayerNorm

MAX_EXPONENT = 24  # beyond, 2^-K times an FP16 weight is below FP16's smallest subnormal
FP32_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)  # 2^-126
FP16_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)  # 2^-14
FP16_SMALLEST_SUBNORMAL = 2.0 ** -24


class StreamScaleError(ModelInputError):
    """An exponent for which the rescaled graph would no longer compute the original."""


def fp16_stored(value: float) -> float:
    """The FP16 constant coremltools stores for an FP32 epsilon: round to nearest, except that a non-zero value that
    would round to 0 becomes +-2^-24 (`_check_underflow_to_zero`, coremltools converters/mil/mil/passes/defs/
    quantization.py; ANE_MATH.md section 11)."""
    stored = float(np.float16(value))
    return math.copysign(FP16_SMALLEST_SUBNORMAL, value) if stored == 0 and value != 0 else stored


def scaled_epsilons(epsilons: dict[str, float], exponent: int) -> dict[str, dict]:
    """For each named epsilon read by a stream norm: eps * 2^-2K in FP32 and what the FP16 package stores, with the
    effective epsilon that storage means in the original units (stored * 2^2K).

    Refused (StreamScaleError): a scaled epsilon below FP32's normal range (the FP32 identity is then no longer
    exact), and an FP16 effective epsilon above both 2^-14 and the unscaled package's own. Below FP16's normal range a
    power of two does change the stored value (subnormals have fewer bits, and coremltools lifts an underflow to
    2^-24), so the effective epsilon grows as 2^(2K-24) once the scaled one underflows; its effect on a norm's
    output is a relative change of about eps / (2 var), which stays under FP16's own 2^-11 rounding for a stream
    variance above eps * 2^10. Allowing up to 2^-14 (FP16's smallest normal, the bound section 11 argues for the
    BERT family's 2^-24 at stream variances above 2^-4) keeps that argument; a larger K is refused rather than
    exported with an epsilon that could act."""
    out = {}
    for name, eps in epsilons.items():
        scaled = float(np.float32(eps) * np.float32(2.0 ** (-2 * exponent)))
        if scaled < FP32_SMALLEST_NORMAL:
            raise StreamScaleError(f"--fp16-scale {exponent}: the epsilon {eps:g} of {name} becomes {scaled:.3g}, "
                                   f"below FP32's normal range ({FP32_SMALLEST_NORMAL:.3g}): the rescaled graph would "
                                   "no longer equal the original; use a smaller exponent")
        stored_unscaled, stored = fp16_stored(eps), fp16_stored(scaled)
        effective = stored * 2.0 ** (2 * exponent)
        if effective > max(FP16_SMALLEST_NORMAL, stored_unscaled):
            raise StreamScaleError(
                f"--fp16-scale {exponent}: the epsilon {eps:g} of {name} is stored in FP16 as {stored:.3g}, "
                f"{effective:.3g} in the stream's original units, above FP16's smallest normal "
                f"{FP16_SMALLEST_NORMAL:.3g} (ANE_MATH.md section 17); use a smaller exponent")
        out[name] = {"epsilon": eps, "scaled_fp32": scaled, "fp16_stored_unscaled": stored_unscaled,
                     "fp16_stored": stored, "fp16_effective": effective, "fp16_exact": effective == stored_unscaled}
    return out


def _scaled_conv(conv: Conv1x1, factor: float, bias_too: bool) -> None:
    """Replace the conv's parameters (they may be views of checkpoint tensors, which must not change) by scaled
    copies."""
    conv.weight = nn.Parameter(conv.weight.detach() * factor, requires_grad=False)
    if conv.bias is not None and bias_too:
        conv.bias = nn.Parameter(conv.bias.detach() * factor, requires_grad=False)


def _scaled_norm_output(norm: ChannelLayerNorm, factor: float) -> None:
    norm.weight = nn.Parameter(norm.weight.detach() * factor, requires_grad=False)
    if norm.bias is not None:
        norm.bias = nn.Parameter(norm.bias.detach() * factor, requires_grad=False)


def stream_norms(encoder: nn.Module) -> dict[str, ChannelLayerNorm]:
    """The norms that read the residual stream (their epsilon is scaled), by name."""
    if isinstance(encoder, BC1SEncoder):
        norms = {}
        for n, layer in enumerate(encoder.layers):
            if isinstance(layer.attn_norm, ChannelLayerNorm):
                norms[f"layers.{n}.attn_norm"] = layer.attn_norm
            norms[f"layers.{n}.mlp_norm"] = layer.mlp_norm
        return {**norms, "final_norm": encoder.final_norm}
    if isinstance(encoder, BC1SBertEncoder):
        return {name: norm for n, layer in enumerate(encoder.layers)
                for name, norm in ((f"layer.{n}.attention.output.LayerNorm", layer.attn_norm),
                                   (f"layer.{n}.output.LayerNorm", layer.mlp_norm))}
    raise StreamScaleError(f"--fp16-scale rescales a ModernBERT or BERT BC1S encoder, not {type(encoder).__name__}")


def find_encoder(module: nn.Module) -> nn.Module:
    """The BC1S encoder inside an export module (itself, or the `encoder` of a body or sentence embedder)."""
    if isinstance(module, (BC1SEncoder, BC1SBertEncoder)):
        return module
    encoder = getattr(module, "encoder", None)
    if isinstance(encoder, (BC1SEncoder, BC1SBertEncoder)):
        return encoder
    raise StreamScaleError(f"--fp16-scale applies to kinds encoder, embedding and body, not a {type(module).__name__}")


def scale_residual_stream(module: nn.Module, exponent: int) -> dict:
    """Rescale the residual stream of `module`'s encoder by 2^-exponent in place (the module's own parameters are
    replaced, the checkpoint's tensors are not touched); returns the record the manifest keeps."""
    if not 0 <= exponent <= MAX_EXPONENT:
        raise StreamScaleError(f"--fp16-scale must be between 0 and {MAX_EXPONENT}, got {exponent}")
    encoder = find_encoder(module)
    if getattr(encoder, "lora", None) is not None:
        raise StreamScaleError("--fp16-scale with LoRA inputs is not implemented (the adapters of layer 0 "
                               "read the stream)")
    norms = stream_norms(encoder)
    epsilons = scaled_epsilons({name: norm.eps for name, norm in norms.items()}, exponent)
    s = 2.0 ** -exponent
    if exponent == 0:
        return {"exponent": 0, "scale": 1.0, "epsilons": epsilons}
    _scaled_norm_output(encoder.embedding_norm, s)
    if isinstance(encoder, BC1SEncoder):
        for n, layer in enumerate(encoder.layers):
            if not isinstance(layer.attn_norm, ChannelLayerNorm):  # layer 0 reads the stream itself
                for conv in (layer.attn.q, layer.attn.k, layer.attn.v):
                    _scaled_conv(conv, 1 / s, bias_too=False)
            _scaled_conv(layer.attn.out, s, bias_too=True)
            _scaled_conv(layer.mlp.output, s, bias_too=True)
    else:
        last = len(encoder.layers) - 1
        for n, layer in enumerate(encoder.layers):
            for conv in (layer.attn.q, layer.attn.k, layer.attn.v, layer.mlp.input):
                _scaled_conv(conv, 1 / s, bias_too=False)
            _scaled_conv(layer.attn.out, s, bias_too=True)
            _scaled_conv(layer.mlp.output, s, bias_too=True)
            _scaled_norm_output(layer.attn_norm, s)
            if n != last:
                _scaled_norm_output(layer.mlp_norm, s)
    for norm in norms.values():
        norm.eps = float(epsilons_scaled(norm.eps, exponent))
    return {"exponent": exponent, "scale": s, "epsilons": epsilons}


def epsilons_scaled(eps: float, exponent: int) -> float:
    """eps * 2^-2K in FP32 (exact for a normal result)."""
    return float(np.float32(eps) * np.float32(2.0 ** (-2 * exponent)))
