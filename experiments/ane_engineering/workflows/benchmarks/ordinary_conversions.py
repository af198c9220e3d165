"""Tiny ordinary torch models converted by plain coremltools: does the environment convert what users ship?

Each model is traced and converted the way coremltools' documentation shows (`torch.jit.trace`, `ct.convert` to an
ML program), with none of the project's converter fixes installed. The attention models build their masks from
tensor sizes (`q.size(2)`, as transformers' mask utilities and `nn.MultiheadAttention` do), which coremltools 9.0's
torch frontend turns into `aten::Int` of a folded constant: its `_cast` calls `int()` on a shape-(1,) array, which
NumPy 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars").

    python -m experiments.ane_engineering.workflows.benchmarks.ordinary_conversions   # prints one JSON object

prints {"numpy": version, "coremltools": version, "torch": version, "models": {name: {"converted": bool,
"error": first line or null, "ops": [op types] }}}. Run in each environment being compared
(workflows/benchmarks/numpy_pin.py).
"""

from __future__ import annotations

import json
import sys
import traceback


def models():
    """name -> (torch module, example inputs, coremltools conversion keywords)."""
    import coremltools as ct
    import torch

    torch.manual_seed(0)

    class MaskedSDPA(torch.nn.Module):  # a causal + padding mask built from the input's length
        def forward(self, q, padding):
            length = q.size(2)
            causal = torch.full((length, length), float("-inf")).triu(1)
            mask = causal[None, None] + (1.0 - padding[:, None, None, :]) * -1e4
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
    q, padding, x = torch.randn(1, 2, 8, 4), torch.ones(1, 8), torch.randn(1, 8, 16)
    fp16 = {"convert_to": "mlprogram", "compute_precision": ct.precision.FLOAT16}
    return {
        "sdpa_ios18_masked": (MaskedSDPA(), {"q": q, "padding": padding},
                              {**fp16, "minimum_deployment_target": ct.target.iOS18}),
        "transformer_encoder_fp16": (encoder, {"x": x}, {**fp16, "minimum_deployment_target": ct.target.iOS17}),
    }


def convert_one(module, inputs: dict, options: dict) -> dict:
    import coremltools as ct
    import torch

    try:
        # traced with autograd on, as users usually do: under no_grad nn.TransformerEncoder takes its fused fast
        # path (aten::_transformer_encoder_layer_fwd), which coremltools has no converter for
        traced = torch.jit.trace(module.eval(), tuple(inputs.values()), check_trace=False)
        model = ct.convert(traced, inputs=[ct.TensorType(name=name, shape=value.shape)
                                           for name, value in inputs.items()],
                           **options)
        program = model._mil_program
        ops = sorted({op.op_type for op in program.functions["main"].operations}) if program is not None else []
        return {"converted": True, "error": None, "ops": ops}
    except Exception as error:  # noqa: BLE001 - the failure is the finding: recorded, not raised
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = frame.filename.split("site-packages/")[-1]
        line = (str(error).strip().splitlines() or [""])[0][:200]
        return {"converted": False, "error": f"{type(error).__name__}: {line} ({where}:{frame.lineno})", "ops": []}


def main() -> int:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # coremltools' version warnings; the versions are recorded instead
    import coremltools as ct
    import numpy as np
    import torch

    results = {name: convert_one(*spec) for name, spec in models().items()}
    print(json.dumps({"numpy": np.__version__, "coremltools": ct.__version__, "torch": torch.__version__,
                      "models": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
