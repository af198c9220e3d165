"""The public sources the ANE rules rest on, one constant each, cited by the rules' `source` fields.

Figures of the reference run are read from core/reference_run.json (never typed here); what this project measured
itself names the test that shows it.
"""

from __future__ import annotations

from ...core import reference_run

SRC_APPLE_ARTICLE = ('Apple Machine Learning Research, "Deploying Transformers on the Apple Neural Engine" (2022), '
                     "https://machinelearning.apple.com/research/neural-engine-transformers")
SRC_ML_ANE = ("apple/ml-ane-transformers, ane_transformers/reference/multihead_attention.py "
              "(https://github.com/apple/ml-ane-transformers)")
SRC_HOLLANCE_UNSUPPORTED = ("hollance/neural-engine, docs/unsupported-layers.md "
                            "(https://github.com/hollance/neural-engine/blob/master/docs/unsupported-layers.md)")
SRC_HOLLANCE_16BIT = ("hollance/neural-engine, docs/16-bit.md ('The ANE appears to use float16 for everything') "
                      "(https://github.com/hollance/neural-engine/blob/master/docs/16-bit.md)")
REFERENCE = reference_run.load()
PLACEMENT = REFERENCE["placement"]  # where Core ML's compute plan put the reference run's ops
SRC_REFERENCE_RUN = f"{reference_run.citation(REFERENCE)}, MLComputePlan under {PLACEMENT['compute_units']}"
SRC_ORION = ('Orion (direct ANE programming): R. Kumaresan, "Orion: Characterizing and Programming Apple\'s Neural '
             'Engine for LLM Training and Inference", arXiv:2603.06728 (2026), its catalogue of ANE constraints')
SRC_CT_FLEX = ('coremltools docs, "Flexible Input Shapes" '
               "(https://apple.github.io/coremltools/docs-guides/source/flexible-inputs.html)")
SRC_FORUM_RANGE = ("Apple Developer Forums thread 724930, answer by an Apple engineer: with range flexibility only the "
                   "default shape runs on the Neural Engine; with enumerated shapes each shape can "
                   "(https://developer.apple.com/forums/thread/724930)")
SRC_CT_TYPED = ('coremltools docs, "Typed Execution Workflow Example": a float 32 typed model executes on a '
                "combination of the GPU and CPU "
                "(https://apple.github.io/coremltools/docs-guides/source/typed-execution-example.html)")
SRC_CT_RNN = ("apple/coremltools issue #1780 (maintainer: RNN or LSTM ops are not supported on the neural engine), "
              "https://github.com/apple/coremltools/issues/1780")
SRC_ANE_LIMITS = ("FluidInference/FluidAudio issue #121, ANE compiler message 'Tensor dimensions ... are not within "
                  "supported range, N[1-65536]D[1-16384]C[1-65536]H[1-16384]W[1-16384]' "
                  "(https://github.com/FluidInference/FluidAudio/issues/121)")
SRC_CT_EINSUM = ('coremltools MIL op reference, iOS15 "einsum": supported equations '
                 '"nchw,nwhu->nchu" and "chw,whr->chr" '
                 '(https://apple.github.io/coremltools/source/coremltools.converters.mil.mil.ops.defs.html)')
SRC_CT_2536 = ("apple/coremltools issue #2536 (Core ML supports tensors of rank <= 5; a dynamic convolution "
               "reported falling off the Neural Engine), https://github.com/apple/coremltools/issues/2536")
SRC_CT_1984 = ("apple/coremltools issue #1984 (fp16 inputs and outputs via ct.TensorType(dtype=np.float16))")
SRC_CAST_MEASURED = ("measured with coremltools 9.0 on Linux by this project: the B x L x C `baseline` export, which "
                     "looks tokens up with an in-graph nn.Embedding, has gather and int cast ops "
                     "(tests/workflows/test_probe_run.py::test_baseline_export_shows_its_violations)")
SRC_EINSUM_MEASURED = ("measured with coremltools 9.0 on Linux by this project: the per-head einsums of the exported "
                       "BC1S body stay native MIL einsums "
                       "(tests/placement/test_static_check.py::test_tiny_bc1s_body_has_no_violations)")
SRC_ANEFORGE_CLIFFS = ("sbryngelson/ANEForge, docs/numeric-cliffs.md (measured on M2 Pro and M5; values and statements "
                       "in run/mil/ane_cliffs.json), "
                       "https://github.com/sbryngelson/ANEForge/blob/main/docs/numeric-cliffs.md")
