"""ANE_BENCHMARKS.md sections of the mil executor as a tool: small ordinary models converted by coremltools
(benchmarks/evidence/executor_models.json; coremltools' own op suite through it: sections_suite_offsets.py).
Every figure is a field of those files (ledger.py)."""

from __future__ import annotations

from .ledger import Evidence


def _link(ev: Evidence) -> str:
    from .report import harness_label, link

    return f"Evidence {link(ev)}, {harness_label(ev)}."


def section_executor_models(ev: Evidence) -> list[str]:
    lines = ["### Ordinary models through the mil executor", "",
             ("Tiny random torch models converted by coremltools (`mlprogram`, FP16, macOS14 target), run by the mil "
             "executor on the CPU and compared with torch FP32; torch's own FP16 run (`model.half()`) is the "
             f"yardstick. Criterion: executor error at most {ev.fig('criterion', 'factor', fmt='.0f')} x the torch "
             f"FP16 error plus {ev.fig('criterion', 'floor', fmt='num4')} x the output scale (derivation: "
             f"`run/mil/model_zoo.py`). {_link(ev)}"), "",
             ("| model | executor max abs error | torch FP16 max abs error | ratio | bound | fp32-accumulate | "
             "fp16-strict error | fp16-strict |"), "|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value("models")):
        strict = ("models", i, "fp16_strict")
        lines.append(
            f"| {row['model']} | {ev.fig('models', i, 'executor_max_abs_error', fmt='num5')} | "
            f"{ev.fig('models', i, 'torch_fp16_max_abs_error', fmt='num5')} | "
            f"{ev.fig('models', i, 'ratio', fmt='.2f')} | {ev.fig('models', i, 'bound', fmt='num5')} | "
            f"{'pass' if row['passes'] else 'FAIL'} | {ev.fig(*strict, 'executor_max_abs_error', fmt='num5')} | "
            f"{'pass' if ev.value(*strict, 'passes') else 'FAIL'} |")
    lines += ["", ("The encoders take an `attention_mask` with padding (their programs hold `gather_nd`); the GRU "
                  "converts to a `while_loop`, the LSTM to `lstm`. The conversions need two fixes with the "
                  "coremltools, NumPy and transformers versions the evidence records (the scalar cast of "
                  "`aten::Int`/`aten::Bool`, and a converter for `aten::new_ones`)."),
              ""]
    return lines


SECTIONS = (
    ("executor_models.json", section_executor_models),
)


def sections(ledger, root) -> list[str]:
    """The executor sections for the files present under `root` (benchmarks/evidence)."""
    lines = []
    for name, section in SECTIONS:
        path = root / name
        if path.is_file():
            lines += section(ledger.open(path))
    return ["## The mil executor as a tool", "", *lines] if lines else []
