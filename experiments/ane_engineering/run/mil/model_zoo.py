"""Small ordinary torch models, converted with coremltools and run through the mil executor.

Each entry builds a tiny model with fixed random weights and example inputs: transformers encoders with an
attention mask (BERT, DistilBERT, RoBERTa, ModernBERT: random configs, 2 layers, hidden 32), a CNN (batch norm,
max and average pools, padding, nearest and bilinear upsampling), an LSTM, a GRU and an MLP. `compare(name)`
converts it (`convert_to="mlprogram"`, FP16 compute precision, minimum_deployment_target macOS14 = iOS17), runs
the package through `MILExecutor`, runs the model in torch FP32 and in torch FP16 (`model.half()` on the CPU) on the
same inputs, and returns the max abs errors of the executor and of torch FP16 against torch FP32.

Agreement criterion ("at the level of torch's own FP16 run"):
    executor_error <= AGREEMENT_FACTOR * torch_fp16_error + AGREEMENT_FLOOR * max|reference|
torch FP16 rounds every op's output to fp16 (CPU kernels accumulate in float32 and round once), as the Core ML
FP16 path stores activations; the executor (fp32-accumulate) does the same but on a different op graph
(coremltools' fused and decomposed ops, a different order of roundings), so its error is a different sample of the
same per-op rounding noise. Each error is the max over the outputs of a sum of per-op rounding errors, each at most
half an fp16 ulp of the op's output; two independent samples of such a maximum differ by a small factor, not by
orders of magnitude. AGREEMENT_FACTOR = 4 allows that factor; a wrong op (a transposed gate, a missing bias, a
mask ignored) gives errors of the order of the outputs themselves, far above 4 x the fp16 error (the tests show it
with a deliberately broken handler). The floor of 2^-10 (one fp16 ulp at 1.0) times the output's scale covers a
model whose torch FP16 run happens to be exact on these inputs (an MLP whose outputs all round alike).

coremltools 9.0's torch frontend needs two fixes for transformers 5 encoders under torch 2.13 / NumPy 2.4,
installed by `conversion_fixes()`: the project's `aten::Int`/`aten::Bool` scalar-cast workaround
(package/convert.py) and a converter for `aten::new_ones` (transformers' mask utilities call
`q_idx.new_ones((), dtype=torch.bool)`; coremltools 9.0 converts `new_zeros` but has no `new_ones`), registered
with `register_torch_op(override=False)` so a coremltools that has one keeps its own.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

AGREEMENT_FACTOR = 4.0
AGREEMENT_FLOOR = 2.0 ** -10
# ModernBERT's local layers see |q - k| <= local_attention // 2 = 4: with 4 padding tokens every padded query still
# sees a real token. With more padding a padded query's whole window is masked; the converted FP16 program then adds
# two -inf masks and softmax returns NaN for that row (measured with 6 of 12 padded), where torch FP32 stays finite.
MODERNBERT_WINDOW = 8
SEQUENCE = 12  # tokens per encoder example (the second one ends in 4 padding tokens, masked out)


@dataclass
class ModelCase:
    name: str
    build: Callable[[], tuple]  # -> (torch module in eval mode, {input name: torch tensor})
    output_names: tuple[str, ...]


# ----------------------------------------------------------------------------------------------- conversion fixes

_FIXED = []


def conversion_fixes() -> None:
    if _FIXED:
        return
    from ...package.convert import install_numpy2_scalar_cast_workaround

    install_numpy2_scalar_cast_workaround()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs
    from coremltools.converters.mil.frontend.torch.torch_op_registry import (
        register_torch_op,
    )
    from coremltools.converters.mil.frontend.torch.utils import NUM_TO_NUMPY_DTYPE

    def new_ones(context, node):  # written like coremltools' own new_zeros, with the requested dtype
        inputs = _get_inputs(context, node)
        shape = inputs[1]
        if isinstance(shape, list):
            shape = mb.concat(values=shape, axis=0) if shape else np.zeros(0, np.int32)
        dtype = inputs[2].val if len(inputs) > 2 and inputs[2] is not None else None
        value = True if dtype is not None and NUM_TO_NUMPY_DTYPE.get(int(dtype)) in (bool, np.bool_) else 1.0
        known = shape if isinstance(shape, np.ndarray) else shape.val
        if known is None:
            context.add(mb.fill(shape=mb.cast(x=shape, dtype="int32"), value=value, name=node.name))
        elif np.asarray(known).size == 0:  # new_ones(()): a scalar
            context.add(mb.const(val=np.array(value), name=node.name))
        else:
            context.add(mb.fill(shape=np.asarray(known, np.int32), value=value, name=node.name))

    register_torch_op(new_ones, override=False)
    _FIXED.append(True)


# ----------------------------------------------------------------------------------------------- the models

def _mask_inputs(vocab: int, seed: int) -> dict:
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, SEQUENCE), generator=generator)  # [2, L]
    mask = torch.ones(2, SEQUENCE, dtype=torch.int64)  # [2, L]
    mask[1, -4:] = 0  # the second example ends in 4 padding tokens (ModernBERT: see MODERNBERT_WINDOW)
    return {"input_ids": ids, "attention_mask": mask}


class _Encoder:
    """last_hidden_state of a transformers encoder, as one tensor (traceable)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        return Wrapped().eval()


def _encoder(config_class, model_class, **config):
    def build():
        import torch

        torch.manual_seed(0)
        # initializer_range 0.2 (transformers' default 0.02): random attention then moves the outputs, so a mask
        # or an attention op handled wrongly shows in the comparison instead of vanishing beside the residual path
        cfg = config_class(initializer_range=0.2, **config)
        cfg._attn_implementation = "eager"
        model = model_class(cfg).eval()
        return _Encoder(model), _mask_inputs(cfg.vocab_size, 1)
    return build


def _bert():
    from transformers import BertConfig, BertModel

    return _encoder(BertConfig, BertModel, vocab_size=100, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)()


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    return _encoder(DistilBertConfig, DistilBertModel, vocab_size=100, dim=32, n_layers=2, n_heads=4,
                    hidden_dim=64, max_position_embeddings=64)()


def _roberta():
    from transformers import RobertaConfig, RobertaModel

    return _encoder(RobertaConfig, RobertaModel, vocab_size=100, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, pad_token_id=1)()


def _modernbert():
    from transformers import ModernBertConfig, ModernBertModel

    return _encoder(ModernBertConfig, ModernBertModel, vocab_size=100, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                    global_attn_every_n_layers=2, local_attention=MODERNBERT_WINDOW, pad_token_id=0)()


def _cnn():
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(8)
            self.pool1 = nn.MaxPool2d(2)
            self.pad = nn.ReflectionPad2d(1)
            self.conv2 = nn.Conv2d(8, 8, 3)
            self.bn2 = nn.BatchNorm2d(8)
            self.pool2 = nn.AvgPool2d(2, ceil_mode=True)
            self.up1 = nn.Upsample(scale_factor=2, mode="nearest")
            self.conv3 = nn.Conv2d(8, 4, 1)
            self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

        def forward(self, image):  # image [1, 3, 16, 16]
            x = self.pool1(torch.relu(self.bn1(self.conv1(image))))  # [1, 8, 8, 8]
            x = self.pool2(torch.relu(self.bn2(self.conv2(self.pad(x)))))  # [1, 8, 4, 4]
            x = nn.functional.pad(self.up1(x), (1, 1, 1, 1))  # [1, 8, 10, 10]
            return self.up2(self.conv3(x))  # [1, 4, 20, 20]

    torch.manual_seed(0)
    model = SmallCNN()
    for bn in (model.bn1, model.bn2):  # running statistics other than 0/1, so batch norm does something
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return model.eval(), {"image": torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))}


def _recurrent(kind: str):
    import torch
    from torch import nn

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(nn, kind)(input_size=8, hidden_size=16, num_layers=1, batch_first=True)
            self.head = nn.Linear(16, 4)

        def forward(self, sequence):  # sequence [2, 10, 8]
            out, _ = self.rnn(sequence)  # [2, 10, 16]
            return self.head(out)  # [2, 10, 4]

    torch.manual_seed(0)
    return Sequence().eval(), {"sequence": torch.randn(2, 10, 8, generator=torch.Generator().manual_seed(1))}


def _mlp():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 32), nn.SiLU(),
                          nn.Linear(32, 8))
    return model.eval(), {"features": torch.randn(4, 16, generator=torch.Generator().manual_seed(1))}


MODELS: dict[str, ModelCase] = {
    "bert": ModelCase("bert", _bert, ("last_hidden_state",)),
    "distilbert": ModelCase("distilbert", _distilbert, ("last_hidden_state",)),
    "roberta": ModelCase("roberta", _roberta, ("last_hidden_state",)),
    "modernbert": ModelCase("modernbert", _modernbert, ("last_hidden_state",)),
    "cnn": ModelCase("cnn", _cnn, ("output",)),
    "lstm": ModelCase("lstm", lambda: _recurrent("LSTM"), ("output",)),
    "gru": ModelCase("gru", lambda: _recurrent("GRU"), ("output",)),
    "mlp": ModelCase("mlp", _mlp, ("output",)),
}


# ----------------------------------------------------------------------------------------------- convert and compare

def convert(model, inputs: dict, output_names, package: Path):
    """torch.jit.trace, then ct.convert to an FP16 ML program for iOS17 (macOS14); saved at `package`."""
    import torch

    from ...package.convert import import_coremltools, quiet_coremltools

    ct = import_coremltools()
    conversion_fixes()
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(inputs.values()), strict=False)
    types = [ct.TensorType(name=name, shape=tuple(value.shape),
                           dtype=np.int32 if value.dtype in (torch.int64, torch.int32) else np.float32)
             for name, value in inputs.items()]
    with quiet_coremltools():
        mlmodel = ct.convert(traced, inputs=types, outputs=[ct.TensorType(name=n) for n in output_names],
                             convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                             minimum_deployment_target=ct.target.macOS14, skip_model_load=True)
    mlmodel.save(str(package))
    return mlmodel


def _max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def torch_outputs(model, inputs: dict, half: bool) -> np.ndarray:
    import copy

    import torch

    with torch.no_grad():
        if not half:
            return model(*inputs.values()).float().numpy()
        model16 = copy.deepcopy(model).half()
        feeds = {k: (v.half() if v.is_floating_point() else v) for k, v in inputs.items()}
        return model16(*feeds.values()).float().numpy()


@dataclass
class Converted:
    """A model converted once: its package, the inputs and the torch FP32 and FP16 outputs."""
    name: str
    package: Path
    feeds: dict  # {input name: numpy array} as the package takes them
    reference: np.ndarray  # torch FP32
    torch_fp16: np.ndarray  # torch model.half() on the CPU
    convert_seconds: float


def prepare(name: str, directory: Path) -> Converted:
    """Build model `name`, run it in torch FP32 and FP16, convert it into `directory`."""
    case = MODELS[name]
    model, inputs = case.build()
    reference = torch_outputs(model, inputs, half=False)
    half = torch_outputs(model, inputs, half=True)
    package = Path(directory) / f"{name}.mlpackage"
    started = time.perf_counter()
    convert(model, inputs, case.output_names, package)
    feeds = {k: v.numpy().astype(np.float32 if v.is_floating_point() else np.int32) for k, v in inputs.items()}
    return Converted(name, package, feeds, reference, half, time.perf_counter() - started)


def evaluate(converted: Converted, mode: str = "fp32-accumulate", registry=None) -> dict:
    """Run the package through the executor; errors of it and of torch FP16 against torch FP32, and the verdict."""
    from .executor import MILExecutor

    kwargs = {} if registry is None else {"registry": registry}
    executor = MILExecutor(converted.package, mode=mode, **kwargs)
    started = time.perf_counter()
    got = executor.run(dict(converted.feeds), as_float32=True)[MODELS[converted.name].output_names[0]]
    run_seconds = time.perf_counter() - started
    reference = converted.reference
    executor_error = _max_abs(got, reference)
    torch_fp16_error = _max_abs(converted.torch_fp16, reference)
    scale = float(np.max(np.abs(reference)))
    bound = AGREEMENT_FACTOR * torch_fp16_error + AGREEMENT_FLOOR * scale
    return {
        "model": converted.name,
        "output_shape": list(reference.shape),
        "max_abs_reference": scale,
        "executor_max_abs_error": executor_error,
        "torch_fp16_max_abs_error": torch_fp16_error,
        "executor_mean_abs_error": float(np.mean(np.abs(got.astype(np.float64) - reference))),
        "torch_fp16_mean_abs_error": float(np.mean(np.abs(converted.torch_fp16.astype(np.float64) - reference))),
        "ratio": executor_error / torch_fp16_error if torch_fp16_error > 0 else None,
        "bound": bound,
        "passes": bool(executor_error <= bound),
        "mode": mode,
        "op_types": dict(executor.op_type_counts),
        "convert_seconds": round(converted.convert_seconds, 2),
        "executor_run_seconds": round(run_seconds, 4),
    }


def compare(name: str, mode: str = "fp32-accumulate") -> dict:
    """Convert model `name` into a temporary directory and evaluate it."""
    with tempfile.TemporaryDirectory() as directory:
        return evaluate(prepare(name, Path(directory)), mode)
