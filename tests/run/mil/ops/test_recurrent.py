"""lstm, gru and rnn in the mil executor against torch's nn.LSTM / nn.GRU / nn.RNN (and, for what torch has not --
peepholes, cell clipping, gru without reset_after, other activations -- against float64 numpy references written
from coremltools' op definitions), at both precision modes.

Tolerances: an fp32 program in fp32-accumulate mode is computed in float32 throughout: 1e-5 absolute for states
bounded by 1 over these few steps. An fp16 program is compared with the float64 result on the same fp16 inputs
and weights: fp32-accumulate rounds each output once (1 fp16 ulp, float32 evaluation slack included);
fp16-strict rounds every product and partial sum of every step: per step at most (I + H + 8) roundings of half an
ulp of values bounded by PREACT_BOUND (the gate pre-activations of these weights, checked), carried through at most
S steps by a recurrence whose gates are below 1, so STRICT_EXTRA = S (I + H + 8) 2^-11 PREACT_BOUND."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from executor_ops_support import MODES, U16, assert_fp16, ct, f16, mb, run

S, B, I, H = 5, 2, 3, 4  # noqa: E741 - steps, batch, input size, hidden size: the letters of torch's RNN equations
PREACT_BOUND = 4.0
STRICT_EXTRA = S * (I + H + 8) * U16 * PREACT_BOUND


def _ifzo_to_ifoz(w):  # torch's LSTM gate order (i, f, g, o) to MIL's (i, f, o, z)
    i, f, z, o = np.split(w, 4)
    return np.concatenate([i, f, o, z])


def _rzn_to_roz(w):  # torch's GRU gate order (r, z, n) to MIL's (r, o, z)
    r, z, n = np.split(w, 3)
    return np.concatenate([r, n, z])


def _tolerance(mode: str, fp16: bool):
    if not fp16:
        return {"ulps": 0, "extra": 1e-5}
    return {"ulps": 1.0, "extra": STRICT_EXTRA if mode == "fp16-strict" else 0.0}


def _data(seed: int, fp16: bool, *shapes):
    rng = np.random.default_rng(seed)
    out = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    return [f16(a) if fp16 else a for a in out]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("output_sequence", [True, False])
def test_lstm_matches_torch(mode, direction, output_sequence):
    fp16 = True
    d = 2 if direction == "bidirectional" else 1
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, bidirectional=d == 2)
    sd = {k: f16(v.detach().numpy()) for k, v in lstm.state_dict().items()}  # weights as an fp16 program stores them
    for suffix in ("", "_reverse")[:d]:  # MIL has one bias: torch gets the same fp16 sum and a zero hidden bias
        sd["bias_ih_l0" + suffix] = f16(sd["bias_ih_l0" + suffix].astype(np.float32) + sd.pop("bias_hh_l0" + suffix))
        sd["bias_hh_l0" + suffix] = np.zeros_like(sd["bias_ih_l0" + suffix])
    x, h0, c0 = _data(1, fp16, (S, B, I), (d, B, H), (d, B, H))
    with torch.no_grad():
        lstm.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()})
        tx = torch.from_numpy(x.astype(np.float32))
        seq, (hn, cn) = lstm(tx.flip(0) if direction == "reverse" else tx,
                             (torch.from_numpy(h0.astype(np.float32)), torch.from_numpy(c0.astype(np.float32))))
    seq, hn, cn = (t.numpy().astype(np.float64) for t in (seq, hn, cn))
    if not output_sequence:
        seq = np.concatenate([seq[-1:, :, :H], seq[:1, :, H:]], axis=-1) if d == 2 else seq[-1:]
    hn, cn = (np.concatenate(list(t), axis=-1) for t in (hn, cn))  # [D, B, H] -> [B, D*H], forward first

    def weights(suffix):
        return (f16(_ifzo_to_ifoz(sd["weight_ih_l0" + suffix])), f16(_ifzo_to_ifoz(sd["weight_hh_l0" + suffix])),
                f16(_ifzo_to_ifoz(sd["bias_ih_l0" + suffix])))

    w_ih, w_hh, bias = weights("")
    extra = {}
    if d == 2:
        extra = dict(zip(("weight_ih_back", "weight_hh_back", "bias_back"), weights("_reverse")))

    def build(x_, h_, c_):
        return mb.lstm(x=x_, initial_h=h_, initial_c=c_, weight_ih=w_ih, weight_hh=w_hh, bias=bias,
                       direction=direction, output_sequence=output_sequence, **extra)

    h_in, c_in = (np.concatenate(list(t), axis=-1) for t in (h0, c0))
    out = run(build, {"x": x, "h": h_in, "c": c_in}, mode)
    for got, want, what in zip(out, (seq, hn, cn), ("sequence", "h", "c")):
        assert_fp16(got, want, what=f"lstm {direction} {what}", **_tolerance(mode, fp16))


def _lstm_reference(x, h, c, w_ih, w_hh, bias, peep, clip, acts):
    """coremltools' iOS15 lstm definition in float64 (peepholes, cell clip, activations by name)."""
    fns = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
           "hard_sigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1), "linear": lambda v: v}
    rec, cell, out_act = (fns[a] for a in acts)
    hid = h.shape[-1]
    p_i, p_f, p_o = np.split(peep, 3)
    seq = []
    for t in range(x.shape[0]):
        g = x[t] @ w_ih.T + h @ w_hh.T + bias
        gi, gf, go, gz = (g[:, k * hid:(k + 1) * hid] for k in range(4))
        i, f = rec(gi + c * p_i), rec(gf + c * p_f)
        c = np.clip(f * c + i * cell(gz), -clip, clip)
        h = rec(go + c * p_o) * out_act(c)
        seq.append(h)
    return np.stack(seq), h, c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("acts", [("sigmoid", "tanh", "tanh"), ("hard_sigmoid", "relu", "linear")])
def test_lstm_peephole_clip_and_activations(mode, acts):
    x, h0, c0, w_ih, w_hh, bias, peep = _data(2, True, (S, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,),
                                              (3 * H,))
    clip = 0.4  # small enough to bind: the reference's cell state reaches it
    f64 = [a.astype(np.float64) for a in (x, h0, c0, w_ih, w_hh, bias, peep)]
    seq, hn, cn = _lstm_reference(*f64, clip, acts)
    assert np.abs(cn).max() == pytest.approx(clip)

    def build(x_, h_, c_):
        return mb.lstm(x=x_, initial_h=h_, initial_c=c_, weight_ih=w_ih, weight_hh=w_hh, bias=bias, peephole=peep,
                       clip=np.float16(clip), output_sequence=True, recurrent_activation=acts[0],
                       cell_activation=acts[1], activation=acts[2])

    out = run(build, {"x": x, "h": h0, "c": c0}, mode)
    tol = _tolerance(mode, True)
    tol["extra"] += U16 * clip  # the clip constant is stored in fp16
    for got, want, what in zip(out, (seq, hn, cn), ("sequence", "h", "c")):
        assert_fp16(got, want, what=f"lstm peephole {what}", **tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_gru_reset_after_matches_torch(mode, direction):
    """iOS18 gru with reset_after is torch's GRU: `bias` the hidden-side bias, `input_bias` the input side."""
    torch.manual_seed(3)
    gru = torch.nn.GRU(I, H)
    sd = {k: f16(v.detach().numpy()) for k, v in gru.state_dict().items()}
    x, h0 = _data(4, True, (S, B, I), (B, H))
    with torch.no_grad():
        gru.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()})
        tx = torch.from_numpy(x.astype(np.float32))
        seq, hn = gru(tx.flip(0) if direction == "reverse" else tx, torch.from_numpy(h0.astype(np.float32))[None])
    seq, hn = seq.numpy().astype(np.float64), hn[0].numpy().astype(np.float64)

    def build(x_, h_):
        return mb.gru(x=x_, initial_h=h_, weight_ih=_rzn_to_roz(sd["weight_ih_l0"]),
                      weight_hh=_rzn_to_roz(sd["weight_hh_l0"]), bias=_rzn_to_roz(sd["bias_hh_l0"]),
                      input_bias=_rzn_to_roz(sd["bias_ih_l0"]), reset_after=True, direction=direction,
                      output_sequence=True)

    out = run(build, {"x": x, "h": h0}, mode, opset=ct.target.iOS18)
    for got, want, what in zip(out, (seq, hn), ("sequence", "h")):
        assert_fp16(got, want, what=f"gru {direction} {what}", **_tolerance(mode, True))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("output_sequence", [True, False])
def test_gru_reset_before_matches_definition(mode, output_sequence):
    """Without reset_after (iOS15-iOS17): o_t = act(W_o x_t + W_ho (r_t * h_{t-1}) + b_o), one bias."""
    x, h0, w_ih, w_hh, bias = _data(5, True, (S, B, I), (B, H), (3 * H, I), (3 * H, H), (3 * H,))
    xs, h, wi, wh, b = (a.astype(np.float64) for a in (x, h0, w_ih, w_hh, bias))

    def sig(v):
        return 1 / (1 + np.exp(-v))

    seq = []
    for t in range(S):
        gi = xs[t] @ wi.T + b
        r = sig(gi[:, :H] + h @ wh[:H].T)
        z = sig(gi[:, 2 * H:] + h @ wh[2 * H:].T)
        o = np.tanh(gi[:, H:2 * H] + (r * h) @ wh[H:2 * H].T)
        h = (1 - z) * o + z * h
        seq.append(h)
    seq = np.stack(seq) if output_sequence else np.stack(seq)[-1:]

    def build(x_, h_):
        return mb.gru(x=x_, initial_h=h_, weight_ih=w_ih, weight_hh=w_hh, bias=bias, output_sequence=output_sequence)

    out = run(build, {"x": x, "h": h0}, mode)
    for got, want, what in zip(out, (seq, h), ("sequence", "h")):
        assert_fp16(got, want, what=f"gru {what}", **_tolerance(mode, True))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nonlinearity,direction", [("tanh", "forward"), ("relu", "reverse")])
def test_rnn_matches_torch(mode, nonlinearity, direction):
    torch.manual_seed(6)
    rnn = torch.nn.RNN(I, H, nonlinearity=nonlinearity)
    sd = {k: f16(v.detach().numpy()) for k, v in rnn.state_dict().items()}
    sd["bias_ih_l0"] = f16(sd["bias_ih_l0"].astype(np.float32) + sd["bias_hh_l0"])  # MIL's one bias, on both sides
    sd["bias_hh_l0"] = np.zeros_like(sd["bias_ih_l0"])
    x, h0 = _data(7, True, (S, B, I), (B, H))
    with torch.no_grad():
        rnn.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()})
        tx = torch.from_numpy(x.astype(np.float32))
        seq, hn = rnn(tx.flip(0) if direction == "reverse" else tx, torch.from_numpy(h0.astype(np.float32))[None])
    seq, hn = seq.numpy().astype(np.float64), hn[0].numpy().astype(np.float64)
    bias = sd["bias_ih_l0"]

    def build(x_, h_):
        return mb.rnn(x=x_, initial_h=h_, weight_ih=sd["weight_ih_l0"], weight_hh=sd["weight_hh_l0"], bias=bias,
                      activation=nonlinearity, direction=direction, output_sequence=True)

    out = run(build, {"x": x, "h": h0}, mode)
    for got, want, what in zip(out, (seq, hn), ("sequence", "h")):
        assert_fp16(got, want, what=f"rnn {nonlinearity} {what}", **_tolerance(mode, True))


def test_lstm_fp32_program_is_float32_exact_to_torch():
    """An fp32 program (iOS15 lstm is fp32 only) in fp32-accumulate: float32 throughout, torch to 1e-5."""
    torch.manual_seed(8)
    lstm = torch.nn.LSTM(I, H)
    sd = {k: v.detach().numpy() for k, v in lstm.state_dict().items()}
    x, h0, c0 = _data(9, False, (S, B, I), (B, H), (B, H))
    with torch.no_grad():
        seq, (hn, cn) = lstm(torch.from_numpy(x), (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None]))

    def build(x_, h_, c_):
        return mb.lstm(x=x_, initial_h=h_, initial_c=c_, weight_ih=_ifzo_to_ifoz(sd["weight_ih_l0"]),
                       weight_hh=_ifzo_to_ifoz(sd["weight_hh_l0"]),
                       bias=_ifzo_to_ifoz(sd["bias_ih_l0"] + sd["bias_hh_l0"]), output_sequence=True)

    out = run(build, {"x": x, "h": h0, "c": c0}, "fp32-accumulate", opset=ct.target.iOS15)
    for got, want in zip(out, (seq.numpy(), hn[0].numpy(), cn[0].numpy())):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
