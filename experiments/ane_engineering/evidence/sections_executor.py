"""ANE_BENCHMARKS.md sections of the mil executor as a tool: coremltools' own op test suite run through it
(benchmarks/evidence/executor_conformance.json) and small ordinary models converted by coremltools
(benchmarks/evidence/executor_models.json). Every figure is a field of those files (ledger.py); names that hold
digits (opsets, coremltools' reasons) are printed as code spans."""

from __future__ import annotations

from .ledger import Evidence

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_sampled")


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
            f"{ev.fig('models', i, 'torch_fp16_max_abs_error', fmt='num5')} | {ev.fig('models', i, 'ratio', fmt='.2f')} | "
            f"{ev.fig('models', i, 'bound', fmt='num5')} | {'pass' if row['passes'] else 'FAIL'} | "
            f"{ev.fig(*strict, 'executor_max_abs_error', fmt='num5')} | "
            f"{'pass' if ev.value(*strict, 'passes') else 'FAIL'} |")
    lines += ["", ("The encoders take an `attention_mask` with padding (their programs hold `gather_nd`); the GRU "
                  "converts to a `while_loop`, the LSTM to `lstm`. The conversions need two fixes with the coremltools, NumPy "
                  "and transformers versions the evidence records (the scalar cast of `aten::Int`/`aten::Bool`, and "
                  "a converter for `aten::new_ones`)."),
              ""]
    return lines


def section_executor_conformance(ev: Evidence, title: str = "coremltools' MIL op test suite through the mil executor"
                                 ) -> list[str]:
    total = ("total",)
    sampling = ev.value("selection", "sample_every")
    cases = ("all cases" if sampling == 1 else
             f"the 1st of every {ev.fig('selection', 'sample_every', fmt='d')} cases of each test function")
    scope = (f"{cases} of {ev.fig('selection', 'files_requested', fmt='len')} test files"
             + ("" if ev.value("selection", "complete_suite") else " (a documented subset)"))
    lines = [f"### {title}", "",
             ("coremltools ships its op tests (`ops/tests/iOS14`..`iOS18`); on Linux they skip the prediction. The "
             "plugin `run/mil/coremltools_suite.py` answers it with the executor and keeps coremltools' own expected "
             f"outputs and tolerances. Run: {scope}, wall time {ev.fig('wall_seconds', fmt='.0f')} s. {_link(ev)}"), "",
             (f"Cases: {ev.fig(*total, 'passed', fmt='d')} passed, {ev.fig(*total, 'failed', fmt='d')} failed, "
             f"{ev.fig(*total, 'error', fmt='d')} errors, {ev.fig(*total, 'skipped', fmt='d')} skipped (exclusions "
             f"below), {ev.fig(*total, 'xfailed', fmt='d')} marked xfail by coremltools, "
             f"{ev.fig(*total, 'not_sampled', fmt='d')} not sampled; the executor ran and compared the programs of "
             f"{ev.fig('executor_ran_program', 'passed', fmt='d')} passing cases."), "",
             "| opset | passed | failed | skipped | xfailed | not sampled |", "|---|---|---|---|---|---|"]
    for opset in ev.value("per_opset"):
        row = ("per_opset", opset)
        lines.append(f"| `{opset}` | {ev.fig(*row, 'passed', fmt='d')} | "
                     f"{ev.fig(*row, 'failed', fmt='d')} | {ev.fig(*row, 'skipped', fmt='d')} | "
                     f"{ev.fig(*row, 'xfailed', fmt='d')} | {ev.fig(*row, 'not_sampled', fmt='d')} |")
    not_run = ev.value("selection", "files_not_run_budget")
    if not_run:
        lines += ["", "Files not started within the time budget: " + ", ".join(f"`{name}`" for name in not_run) + "."]
    lines += ["", "Exclusions (skips), by reason (the plugin's own, or coremltools' own skip reason as given):", ""]
    for i, exclusion in enumerate(ev.value("exclusions")):
        lines.append(f"- `{exclusion['reason']}`: {ev.fig('exclusions', i, 'cases', fmt='d')} cases")
    unsupported = ev.value("unsupported_ops_in_failures")
    lines += ["", f"Failures: {ev.fig('failures', fmt='len')}, each listed with its reason in the evidence file."]
    if unsupported:
        lines.append("Ops named unsupported in them: " + ", ".join(
            f"`{op}` ({ev.fig('unsupported_ops_in_failures', op, fmt='d')})" for op in unsupported) + ".")
    failing = [name for name, counts in ev.value("per_test_class").items() if counts["failed"] + counts["error"]]
    if failing:
        lines += ["", "Test classes with failures (failed cases):", ""]
        lines += [f"- `{name}`: {ev.fig('per_test_class', name, 'failed', fmt='d')}" for name in failing]
    return lines + [""]


def section_executor_conformance_rest(ev: Evidence) -> list[str]:
    return section_executor_conformance(ev, "The same, second run: the files the first run's time budget left out")


SECTIONS = (
    ("executor_conformance.json", section_executor_conformance),
    ("executor_conformance_rest.json", section_executor_conformance_rest),
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
