"""Recurrent layers: lstm, gru, rnn (coremltools' defs iOS15/recurrent.py, fp16 from iOS17, gru's
`reset_after` and `input_bias` from iOS18).

Layouts (MIL): x [s, b, I]; initial_h / initial_c [b, D*H] (D = 2 for a bidirectional lstm, forward half first);
weight_ih [G*H, I], weight_hh [G*H, H] with the gate blocks in MIL's order:
  lstm  G = 4, gates i, f, o, z (input, forget, output, cell); peephole [3H] = p_i, p_f, p_o;
  gru   G = 3, gates r, o, z (reset, output/new, update);
  rnn   G = 1.
Outputs: (sequence [s or 1, b, D*H], final h [b, D*H]) and, for lstm, final c [b, D*H].

Details the op definitions leave open, taken from coremltools' own numpy references in its op tests
(ops/tests/iOS14/test_recurrent.py) and the torch parity test of iOS18 gru:
- "reverse" runs over x from the end and writes the sequence output in processing order (step k holds the state
  after x[s-1-k]); in a bidirectional lstm the backward half is written back at the positions of the inputs it
  read (as torch does), and its final state is the one after x[0];
- lstm `clip` bounds the cell state c_t to [-clip, clip] after each update; peepholes read c_{t-1} for the input
  and forget gates and the updated c_t for the output gate;
- gru (reset_after False, iOS15-iOS17 and the iOS18 default): o_t = act(W_o x_t + b_o + W_ho (r_t * h_{t-1}));
  with reset_after (iOS18): o_t = act(W_o x_t + b_io + r_t * (W_ho h_{t-1} + b_ho)), `bias` being the
  hidden-side bias and `input_bias` the input-side one; h_t = (1 - z_t) * o_t + z_t * h_{t-1};
- activations: sigmoid, tanh, scaled_tanh (tanh at its default alpha = beta = 1), relu, linear, and
  hard_sigmoid / sigmoid_hard (min(max(0.2 x + 0.5, 0), 1), MIL's sigmoid_hard defaults).

Precision: the whole layer is one op. fp32-accumulate keeps the state in float32 across steps and rounds the
outputs once; fp16-strict rounds every product, sum and activation of every step to fp16 (the state is fp16).
"""

from __future__ import annotations

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_bool, cached_const, expit


def _activation(name: str, x, num):
    if name in ("tanh", "scaled_tanh"):
        return num.fn(np.tanh, x)
    if name == "sigmoid":
        return num.fn(expit, x)
    if name in ("hard_sigmoid", "sigmoid_hard"):
        return np.minimum(np.maximum(x * num.c(0.2) + num.c(0.5), num.c(0)), num.c(1))
    if name == "relu":
        return np.maximum(x, num.c(0))
    if name == "linear":
        return x
    raise UnsupportedOpError(f"recurrent activation {name!r} is not one MIL defines")


def _weights_t(node, num, args, key):
    """weight [G*H, K] as a [K, G*H] operand in the compute dtype, converted once."""
    if key not in node.cache:
        node.cache[key] = np.ascontiguousarray(num.f(args[key]).T)
    return node.cache[key]


def _vector(node, num, args, key, size):
    if args.get(key) is None:
        return np.zeros(size, dtype=num.dtype)
    return cached_const(node, num, key, args[key])


def _input_projection(num, x, w_t, bias):
    """x [s, b, I] @ W^T + bias for every step at once: [s, b, G*H]."""
    return num.r(num.matmul(x, w_t) + bias)


def _single_direction(node, args, num, op: str):
    """The arguments gru and rnn share: x [s, b, I], initial_h [b, H], H, whether the direction is reverse (the
    two MIL allows them) and the transposed weights."""
    x = num.f(args["x"])  # [s, b, I]
    h0 = num.f(args["initial_h"])  # [b, H]
    direction = str(args.get("direction", "forward"))
    if direction not in ("forward", "reverse"):
        raise UnsupportedOpError(f"{node.where()}: {op} direction {direction!r} is not one MIL defines")
    w_ih, w_hh = _weights_t(node, num, args, "weight_ih"), _weights_t(node, num, args, "weight_hh")
    return x, h0, h0.shape[-1], direction == "reverse", w_ih, w_hh


def _run_direction(step, projected, h, c, reverse: bool):
    """Iterate `step` over the time axis; returns the per-step states in processing order and the final state."""
    order = range(projected.shape[0] - 1, -1, -1) if reverse else range(projected.shape[0])
    states = []
    for t in order:
        h, c = step(projected[t], h, c)
        states.append(h)
    return np.stack(states), h, c


def _sequence_output(states, output_sequence: bool):
    return states if output_sequence else states[-1:]


# ------------------------------------------------------------------------------------------------ lstm

def _lstm_direction(node, args, num, x, h0, c0, suffix: str, reverse: bool):
    hidden = h0.shape[-1]
    w_ih = _weights_t(node, num, args, "weight_ih" + suffix)
    w_hh = _weights_t(node, num, args, "weight_hh" + suffix)
    bias = _vector(node, num, args, "bias" + suffix, 4 * hidden)
    peep = _vector(node, num, args, "peephole" + suffix, 3 * hidden)
    p_i, p_f, p_o = peep[:hidden], peep[hidden:2 * hidden], peep[2 * hidden:]
    act_gate, act_cell, act_out = (str(args.get(k, d)) for k, d in (
        ("recurrent_activation", "sigmoid"), ("cell_activation", "tanh"), ("activation", "tanh")))
    clip = args.get("clip")
    clip = None if clip is None else num.c(float(np.asarray(clip)))

    def step(projected_t, h, c):  # projected_t [b, 4H]
        gates = num.r(projected_t + num.matmul(h, w_hh))
        g_i, g_f, g_o, g_z = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i = _activation(act_gate, num.r(g_i + num.r(c * p_i)), num)
        f = _activation(act_gate, num.r(g_f + num.r(c * p_f)), num)
        z = _activation(act_cell, g_z, num)
        c = num.r(num.r(f * c) + num.r(i * z))
        if clip is not None:
            c = np.clip(c, -clip, clip)
        o = _activation(act_gate, num.r(g_o + num.r(c * p_o)), num)
        return num.r(o * _activation(act_out, c, num)), c

    return _run_direction(step, _input_projection(num, x, w_ih, bias), h0, c0, reverse)


@register("lstm")
def op_lstm(node, args, num):
    x = num.f(args["x"])  # [s, b, I]
    h0, c0 = num.f(args["initial_h"]), num.f(args["initial_c"])  # [b, D*H]
    direction = str(args.get("direction", "forward"))
    output_sequence = as_bool(args.get("output_sequence", False))
    if direction in ("forward", "reverse"):
        states, h, c = _lstm_direction(node, args, num, x, h0, c0, "", direction == "reverse")
        return _sequence_output(states, output_sequence), h, c
    if direction != "bidirectional":
        raise UnsupportedOpError(f"{node.where()}: lstm direction {direction!r} is not one MIL defines")
    hidden = h0.shape[-1] // 2
    fwd, h_f, c_f = _lstm_direction(node, args, num, x, h0[:, :hidden], c0[:, :hidden], "", False)
    bwd, h_b, c_b = _lstm_direction(node, args, num, x, h0[:, hidden:], c0[:, hidden:], "_back", True)
    bwd = bwd[::-1]  # back to the positions of the inputs each backward state read
    if output_sequence:
        sequence = np.concatenate([fwd, bwd], axis=-1)
    else:  # each direction's final state: forward after x[s-1], backward after x[0]
        sequence = np.concatenate([fwd[-1:], bwd[:1]], axis=-1)
    return sequence, np.concatenate([h_f, h_b], axis=-1), np.concatenate([c_f, c_b], axis=-1)


# ------------------------------------------------------------------------------------------------ gru

@register("gru")
def op_gru(node, args, num):
    x, h0, hidden, reverse, w_ih, w_hh = _single_direction(node, args, num, "gru")
    reset_after = as_bool(args.get("reset_after", False))
    bias = _vector(node, num, args, "bias", 3 * hidden)
    input_bias = _vector(node, num, args, "input_bias", 3 * hidden)
    act_gate = str(args.get("recurrent_activation", "sigmoid"))
    act_out = str(args.get("activation", "tanh"))
    w_hh_rz = np.ascontiguousarray(np.concatenate([w_hh[:, :hidden], w_hh[:, 2 * hidden:]], axis=1))
    w_hh_o = np.ascontiguousarray(w_hh[:, hidden:2 * hidden])
    b_r, b_o, b_z = bias[:hidden], bias[hidden:2 * hidden], bias[2 * hidden:]

    if reset_after:  # `bias` is the hidden-side bias, added to W_h h inside the reset product
        projected = _input_projection(num, x, w_ih, input_bias)
        hidden_bias_rz = np.concatenate([b_r, b_z])
    else:  # one bias (input + hidden), added with the input projection
        projected = _input_projection(num, x, w_ih, num.r(bias + input_bias))
        hidden_bias_rz = None

    def step(projected_t, h, _):  # projected_t [b, 3H]
        rz = num.matmul(h, w_hh_rz)  # [b, 2H]
        if hidden_bias_rz is not None:
            rz = num.r(rz + hidden_bias_rz)
        r = _activation(act_gate, num.r(projected_t[:, :hidden] + rz[:, :hidden]), num)
        z = _activation(act_gate, num.r(projected_t[:, 2 * hidden:] + rz[:, hidden:]), num)
        if reset_after:
            recurrent_o = num.r(r * num.r(num.matmul(h, w_hh_o) + b_o))
        else:
            recurrent_o = num.matmul(num.r(r * h), w_hh_o)
        o = _activation(act_out, num.r(projected_t[:, hidden:2 * hidden] + recurrent_o), num)
        h = num.r(num.r(num.r(num.c(1) - z) * o) + num.r(z * h))
        return h, None

    states, h, _ = _run_direction(step, projected, h0, None, reverse)
    return _sequence_output(states, as_bool(args.get("output_sequence", False))), h


# ------------------------------------------------------------------------------------------------ rnn

@register("rnn")
def op_rnn(node, args, num):
    x, h0, hidden, reverse, w_ih, w_hh = _single_direction(node, args, num, "rnn")
    bias = _vector(node, num, args, "bias", hidden)
    act = str(args.get("activation", "tanh"))

    def step(projected_t, h, _):
        return _activation(act, num.r(projected_t + num.matmul(h, w_hh)), num), None

    states, h, _ = _run_direction(step, _input_projection(num, x, w_ih, bias), h0, None, reverse)
    return _sequence_output(states, as_bool(args.get("output_sequence", False))), h
