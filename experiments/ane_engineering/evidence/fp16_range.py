"""FP16 range analysis of the BC1S body: how close does each activation come to the cliff it faces on the Neural
Engine -- the matmul cliff for conv and einsum outputs, the FP16 maximum of 65,504 for the rest?

The ANE computes in FP16. ModernBERT-family models are reported to carry large activation outliers in a few
residual channels (ANE_MATH.md, "10. FP16 range"), so before trusting an FP16 package we record, over the fixture
questions, the largest |value| at every tensor site of the FP32 torch BC1S body and compare it with 65,504. FP32 is
the reference for ranges: FP16 rounding (2^-11 relative per op) moves magnitudes far less than the 4x margin of a
"near" verdict.

How it runs: every fixture question that fits one of `lengths` runs on the smallest such bucket, with the device
inputs of package/inputs/device_inputs.py `body_inputs`, through `BC1SBody(config, tensors, length)` in FP32. Forward hooks
(`register_forward_hook` / `register_forward_pre_hook`) on the body's submodules record each site. Two kinds of site
are not module outputs:
  - attention (model/bc1s/attention.py): SingleHeadAttention reports its intermediates to an analysis-only `observer`
    (q, k, v, the RoPE halves, per head the two half score einsums and their sum -- the score tensor before the
    mask --, each head's output and the concatenated heads); the observer is None while exporting;
  - GeGLU (model/bc1s/ffn.py): gelu(input conv) is recomputed from the input conv's output with the module's
    `approximate`; the product gelu(input) * gate is the input of the output conv (a hook point).

Per site it keeps the max |value| over VALID token columns only (the columns of real tokens; padding columns are
masked as keys and never read) and, separately, over ALL columns: padding columns are still computed in FP16 on the
device, and an inf there would reach valid tokens as NaN (a masked key still multiplies its V row by weight 0, and
0 * inf = NaN; an inf score plus the finite -1e4 bias stays inf). Verdicts compare both with the site's cliff
(`site_cliff`): the Neural Engine's published matmul cliff (run/mil/ane_cliffs.json, read through run/mil/cliffs.py)
for the sites that are conv or einsum outputs in the export (q, k, v, the score halves and scores, the heads, the
attention and MLP projections, the scorer's projections, the option logits), the FP16 maximum for every other site:
  ok        headroom (cliff / max |value|) >= 4
  near      headroom < 4
  overflow  max |value| > cliff (or non-finite)
The exported package's own headroom, op by op with the mask inside the score einsum, is measured by the mil
executor (run/mil/headroom.py; probe.json and the validation report): this FP32 analysis names the model's sites.

Layer-norm statistics (norm.py computes centered = x - mean, then mean(centered * centered)) are recorded per input
column for information only: the variance, the largest single (x - mean)^2 and the sum of squares, each with what
it would give in FP16. They are not part of any verdict: an elementwise FP16 square inside the norm is a hazard no
source establishes for the Neural Engine (coremltools fuses the pattern into one layer_norm op whose internal
precision is not published), and the device evidence available on this model family points at the matmul outputs
instead (sbryngelson/ANEForge, docs/numeric-cliffs.md; john-rocky/coreai-model-zoo,
knowledge/laya-multilingual-port.md: "the error is the fp16 matmul activations themselves, amplified at the [CLS]
massive activation").

Attention scores (the QK sum before the mask, Q pre-scaled by head_dim^-0.5 as exported) get the magnitude verdict
plus a mask check. The mask is a finite additive -1e4 (buckets.MASK_BIAS), not -inf: it is exactly equivalent to -inf
only while exp(s_masked - 1e4 - m) underflows to 0, m being the row's largest visible score. exp(x) rounds to 0 in
FP16 for x < -17.33 (half the smallest subnormal, 2^-25) and in FP32 for x < -103.97 (2^-150). So per valid query
row: spread = max(masked scores) - max(visible scores); the mask is exact in FP16 while spread < 1e4 - 17.33
(`mask_headroom` = (1e4 - 17.33) / spread, verdict as above). Also reported (ANE_MATH.md, "6. The finite -1e4 mask against -inf"): the
smallest visible score and whether any visible score lies below -1e4 + 20 (such a key would be as suppressed as a
masked one).

`needs_clamp(report)` lists the sites whose verdict (valid or all columns) is "near" or "overflow";
`clamp_recommendations(report)` says what to do about each: a saturating clamp at the cliff for plain activations
(identity on every observed value, turns an inf into a finite value), a clamp of scores at +-4,991 (keeps
spread <= 9,982.67 so the -1e4 mask stays exact in FP16), and for the residual stream and what it feeds an exact
power-of-two rescaling of the stream (layer norm is scale invariant up to eps).
"""  # noqa: E501 - this docstring is recorded verbatim as the evidence's "method" (benchmarks/evidence/fp16_range_*.json)

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..core.buckets import BUCKET_LENGTHS, MARKER_SLOTS, MASK_BIAS, buckets_within, smallest_bucket
from ..core.figures import Document
from ..model.bc1s.models import BC1SBody
from ..package.inputs.device_inputs import body_inputs
from ..package.inputs.questions import Question, encode_question, fixture_sha256, load_questions
from ..run.mil.cliffs import FP16_MAX, MATMUL_CLASS, AneCliffs
from .range_recorder import RangeRecorder, _Site, instrument

NEAR_HEADROOM = 4.0  # headroom below this is "near"
FP16_EXP_UNDERFLOW = -math.log(2.0 ** -25)  # 17.33: exp(-x) rounds to 0 in FP16 beyond this
FP32_EXP_UNDERFLOW = -math.log(2.0 ** -150)  # 103.97: the same in FP32
MASK_SPREAD_LIMIT = -MASK_BIAS - FP16_EXP_UNDERFLOW  # 9982.67: masked - visible max must stay below this
SCORE_CLAMP = MASK_SPREAD_LIMIT / 2.0  # scores in [-b, b] give spread <= 2b
VERDICT_ORDER = ("ok", "near", "overflow")
# Outlier channels: a channel whose largest |value| over valid tokens is at least OUTLIER_RATIO times the median
# channel's. LLM.int8() (Dettmers et al., 2022, arXiv:2208.07339) calls hidden-state features of magnitude >= 6
# outliers in models whose typical magnitude is about 1; the ratio to the median makes that criterion scale-free.
# Reported, not a verdict: FP16 headroom is judged by magnitude alone.
OUTLIER_RATIO = 6.0
OUTLIER_TOP = 3  # channels listed per site, largest first
FP16_MIN_NORMAL = 2.0 ** -14  # 6.1e-5: below this FP16 values are subnormal (fewer significant bits)


# Sites that are conv or einsum outputs in the BC1S export (model/bc1s/: 1x1 convs and per-head einsums), by the
# last part of their group name: they face the matmul cliff.
MATMUL_SITES = ("attn.q", "attn.k", "attn.v", "attn.scores", "attn.heads", "attn.out", "mlp.input", "mlp.gate",
                "mlp.out", "scorer.proj", "scorer.scores", "option_logits")
MATMUL_CLIFF = AneCliffs().by_class[MATMUL_CLASS]


def site_cliff(name: str) -> tuple[str, float]:
    """(cliff name, value) a site faces on the Neural Engine."""
    group = _group_of(name)
    if any(group == s or group.endswith("." + s) or group.startswith(s) for s in MATMUL_SITES) \
            and not group.endswith(("_rope", "concat")):
        return MATMUL_CLIFF.name, MATMUL_CLIFF.value
    return "fp16-max", FP16_MAX


def verdict_for(max_abs: float, limit: float = FP16_MAX) -> str:
    if not math.isfinite(max_abs) or max_abs > limit:
        return "overflow"
    if max_abs * NEAR_HEADROOM > limit:
        return "near"
    return "ok"


def worst(*verdicts: str) -> str:
    return max(verdicts, key=VERDICT_ORDER.index) if verdicts else "ok"


def headroom(max_abs: float, limit: float = FP16_MAX) -> float | None:
    """limit / max_abs; None when max_abs is 0 (no finite ratio) -- JSON has no infinity."""
    if not math.isfinite(max_abs):
        return 0.0
    return None if max_abs <= 0 else limit / max_abs


def _layer_of(site: str) -> str:
    parts = site.split(".")
    if parts[0] in ("encoder", "head") and len(parts) > 1 and parts[1].isdigit():
        return f"{parts[0]}.{parts[1]}"
    return {"embeddings": "embeddings", "embedding_norm": "embeddings", "head_input": "head_input",
            "final_norm": "final_norm", "scorer": "scorer",
            "option_logits": "option_logits"}.get(parts[0], parts[0])


def _group_of(site: str) -> str:
    """Layer-independent name of a site: 'encoder.3.mlp.gate' -> 'encoder.mlp.gate'."""
    parts = site.split(".")
    if parts[0] in ("encoder", "head") and len(parts) > 1 and parts[1].isdigit():
        return ".".join([parts[0]] + parts[2:])
    return site


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _site_entry(name: str, site: _Site) -> dict:
    values = site.values
    cliff, limit = site_cliff(name)
    verdict_valid, verdict_all = verdict_for(values.valid, limit), verdict_for(values.all, limit)
    entry = {"kind": site.kind, "layer": _layer_of(name), "group": _group_of(name), "cliff": cliff,
             "cliff_value": limit,
             "max_abs_valid": _finite(values.valid), "max_abs_all": _finite(values.all),
             "finite_valid": math.isfinite(values.valid), "finite_all": math.isfinite(values.all),
             "headroom_valid": headroom(values.valid, limit), "headroom_all": headroom(values.all, limit),
             "verdict_valid": verdict_valid, "verdict_all": verdict_all,
             "argmax_valid": values.where_valid, "argmax_all": values.where_all}
    verdicts = [verdict_valid, verdict_all]
    if site.channels is not None:
        entry["channels"] = channel_entry(site.channels)
    if site.kind == "norm_input":
        norm = {}
        for key in ("variance", "max_sq_dev", "sum_sq_dev"):
            m = site.extra[key]
            norm[key] = {"valid": _finite(m.valid), "all": _finite(m.all),
                         "headroom_valid": headroom(m.valid), "headroom_all": headroom(m.all),
                         "verdict_valid": verdict_for(m.valid), "verdict_all": verdict_for(m.all),
                         "argmax_valid": m.where_valid}
        norm["min_variance_valid"] = _finite(site.min_variance)
        norm["max_abs_dev_valid"] = _finite(math.sqrt(site.extra["max_sq_dev"].valid))
        norm["max_abs_dev_all"] = _finite(math.sqrt(site.extra["max_sq_dev"].all))
        variance_verdict = worst(*(norm[k][f"verdict_{c}"] for k in ("variance", "max_sq_dev")
                                   for c in ("valid", "all")))
        norm["variance_verdict"] = variance_verdict  # what an FP16 square would give: information, not a verdict
        norm["status"] = "information only: an FP16 square inside layer_norm is not established for the Neural Engine"
        entry["norm"] = norm
    if site.kind == "scores":
        spread_valid, spread_all = site.spread_valid, site.spread_all
        seen_valid, seen_all = spread_valid > -math.inf, spread_all > -math.inf  # rows with a masked key exist
        mask_valid = verdict_for(max(spread_valid, 0.0), MASK_SPREAD_LIMIT) if seen_valid else "ok"
        mask_all = verdict_for(max(spread_all, 0.0), MASK_SPREAD_LIMIT) if seen_all else "ok"
        entry["mask"] = {
            "mask_bias": MASK_BIAS,
            "min_visible_score": _finite(site.min_visible), "max_visible_score": _finite(site.max_visible),
            "visible_below_mask_plus_20": site.below_floor > 0, "visible_below_mask_plus_20_count": site.below_floor,
            "max_spread_masked_minus_visible_valid": _finite(spread_valid) if seen_valid else None,
            "max_spread_masked_minus_visible_all": _finite(spread_all) if seen_all else None,
            "spread_limit_fp16": MASK_SPREAD_LIMIT,
            "mask_headroom_valid": headroom(max(spread_valid, 0.0), MASK_SPREAD_LIMIT) if seen_valid else None,
            "mask_headroom_all": headroom(max(spread_all, 0.0), MASK_SPREAD_LIMIT) if seen_all else None,
            "mask_verdict_valid": mask_valid, "mask_verdict_all": mask_all,
            "argmax_spread_valid": site.where_spread,
        }
        mask_verdict = worst(mask_valid, mask_all, "overflow" if site.below_floor else "ok")
        entry["mask"]["mask_verdict"] = mask_verdict
        verdicts.append(mask_verdict)
    entry["verdict"] = worst(*verdicts)
    return entry


def channel_entry(channels: torch.Tensor) -> dict:
    """The largest channels of a site and its outlier channels (max |value| >= OUTLIER_RATIO x the median channel's)."""
    values = channels.numpy()
    order = np.argsort(-values, kind="stable")
    median = float(np.median(values))
    outliers = [int(c) for c in order if median > 0 and values[c] >= OUTLIER_RATIO * median]
    return {"median_channel_max_abs": _finite(median),
            "top": [{"channel": int(c), "max_abs": _finite(float(values[c]))} for c in order[:OUTLIER_TOP]],
            "top_to_median": _finite(float(values[order[0]]) / median) if median > 0 else None,
            "outliers": outliers[:16], "outlier_count": len(outliers)}


def _summaries(sites: dict, key: str) -> dict:
    """Per layer (key='layer') or per site group (key='group'): the largest max |value| and the worst verdict."""
    out: dict[str, dict] = {}
    for name, entry in sites.items():
        bucket = out.setdefault(entry[key], {"max_abs_valid": 0.0, "max_abs_all": 0.0, "site_valid": None,
                                             "site_all": None, "verdict": "ok", "sites": 0, "headroom_valid": None,
                                             "headroom_all": None, "_low": {"valid": math.inf, "all": math.inf}})
        bucket["sites"] += 1
        bucket["verdict"] = worst(bucket["verdict"], entry["verdict"])
        if "channels" in entry:
            ratio = entry["channels"]["top_to_median"]
            if ratio is not None and ratio > bucket.get("max_top_to_median", 0.0):
                bucket["max_top_to_median"] = ratio
            counts = bucket.setdefault("outlier_channels", {})
            for channel in entry["channels"]["outliers"]:
                counts[str(channel)] = counts.get(str(channel), 0) + 1  # in how many of the group's sites
        for c in ("valid", "all"):
            value = entry[f"max_abs_{c}"]
            value = math.inf if value is None else value
            if value > bucket[f"max_abs_{c}"] or bucket[f"site_{c}"] is None:
                bucket[f"max_abs_{c}"], bucket[f"site_{c}"] = value, name
            room = entry[f"headroom_{c}"]  # against each site's own cliff; the group keeps its smallest
            room = math.inf if room is None else room
            if room < bucket["_low"][c]:
                bucket["_low"][c] = room
                bucket[f"headroom_{c}"] = entry[f"headroom_{c}"]
        if key == "layer" and name.endswith(".residual"):  # the residual stream after this layer
            bucket["residual_max_abs_valid"] = entry["max_abs_valid"]
            bucket["residual_max_abs_all"] = entry["max_abs_all"]
        if entry["kind"] == "norm_input":
            var = entry["norm"]["variance"]["valid"]
            dev = entry["norm"]["max_abs_dev_valid"]
            var, dev = math.inf if var is None else var, math.inf if dev is None else dev
            bucket["max_variance_valid"] = max(bucket.get("max_variance_valid", 0.0), var)
            low = entry["norm"]["min_variance_valid"]
            bucket["min_variance_valid"] = min(bucket.get("min_variance_valid", math.inf),
                                               math.inf if low is None else low)
            bucket["max_abs_dev_valid"] = max(bucket.get("max_abs_dev_valid", 0.0), dev)
    for bucket in out.values():
        del bucket["_low"]
        for c in ("valid", "all"):
            bucket[f"max_abs_{c}"] = _finite(bucket[f"max_abs_{c}"])
    return out


def needs_clamp(report: dict) -> list[str]:
    """Sites (in model order) whose verdict, over valid or all columns, is 'near' or 'overflow'."""
    return [name for name, entry in report["sites"].items() if entry["verdict"] != "ok"]


def clamp_recommendations(report: dict) -> list[dict]:
    """For each site of needs_clamp: what is wrong, a suggested bound, and the remedy."""
    out = []
    for name in needs_clamp(report):
        entry = report["sites"][name]
        peak = entry["max_abs_all"] if entry["max_abs_all"] is not None else math.inf
        limit = entry["cliff_value"]
        rec = {"site": name, "kind": entry["kind"], "verdict": entry["verdict"], "cliff": entry["cliff"],
               "max_abs_valid": entry["max_abs_valid"], "max_abs_all": entry["max_abs_all"]}
        magnitude = worst(entry["verdict_valid"], entry["verdict_all"])
        stream = entry["kind"] == "norm_input" or name.endswith(("residual", "embeddings", "head_input"))
        if entry["kind"] == "scores" and entry["mask"]["mask_verdict"] != "ok" and magnitude == "ok":
            rec.update(hazard="finite -1e4 mask no longer exact in FP16", suggested_bound=SCORE_CLAMP,
                       remedy=f"clamp scores to +-{SCORE_CLAMP:.1f} before adding the mask (masked - visible <= "
                              f"{MASK_SPREAD_LIMIT:.2f})")
        elif entry["kind"] == "scores":
            rec.update(hazard="score magnitude", suggested_bound=SCORE_CLAMP,
                       remedy=f"clamp scores to +-{SCORE_CLAMP:.1f} before the mask and softmax: keeps scores + mask "
                              "finite and the -1e4 mask exact in FP16; it changes scores beyond the bound")
        elif stream:
            k = max(1, math.ceil(math.log2(peak * NEAR_HEADROOM / limit))) if math.isfinite(peak) else None
            rec.update(hazard="residual-stream magnitude", suggested_bound=limit,
                       remedy=("scale the residual stream by 2^-K (probe --fp16-scale): every residual write and the "
                               "stream entering the first layer carry 2^-K, each norm reading it eps * 2^-2K; exact, "
                               "since layer norm is scale invariant and a power of two changes no FP16 mantissa"),
                       scale_exponent=k)
        else:
            rec.update(hazard="activation magnitude", suggested_bound=limit,
                       remedy=("values exceed the cliff: a clamp keeps them finite but changes them; rescale "
                               "instead (a power-of-two factor folded into the producing conv and undone where the "
                               "next norm makes it vanish)" if magnitude == "overflow" else
                               "saturating clamp at the cliff: identity on every observed value, turns a future "
                               "overflow into a finite value"))
        if not math.isfinite(peak):
            rec["note"] = "non-finite already in the FP32 reference"
        out.append(rec)
    return out


def _question_inputs(checkpoint, encoded, length: int) -> dict[str, torch.Tensor]:
    arrays = body_inputs(checkpoint.config, checkpoint.tensors, encoded.input_ids, encoded.token_types,
                         encoded.marker_positions, length)
    return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in arrays.items()}


def plan_questions(checkpoint, lengths=BUCKET_LENGTHS, questions: list[Question] | None = None,
                   limit_per_bucket: dict | None = None) -> tuple[dict[int, list], list[dict]]:
    """Encode the questions; group them by the smallest of `lengths` that fits; list the ones that fit none.

    limit_per_bucket {length: n} keeps n questions of that bucket, evenly spaced in fixture order (so a subset
    still spans the fixture's languages and kinds), and lists the others as skipped (reason 'limit')."""
    checkpoint.require_head("the FP16 range analysis")
    tokenizer = checkpoint.require_tokenizer("the FP16 range analysis")
    questions = load_questions() if questions is None else questions
    # a model with absolute positions (BERT) has no bucket beyond its position table
    lengths = buckets_within(checkpoint.config.encoder.max_position_embeddings, tuple(sorted(int(x) for x in lengths)))
    by_bucket: dict[int, list] = {length: [] for length in lengths}
    skipped = []
    for question in questions:
        encoded = encode_question(tokenizer, checkpoint.config.head, question)
        length = smallest_bucket(encoded.num_tokens, lengths)
        if length is None:
            skipped.append({"id": question.id, "tokens": encoded.num_tokens, "reason": "fits no bucket"})
        else:
            by_bucket[length].append(encoded)
    for length, encoded_list in by_bucket.items():
        cap = (limit_per_bucket or {}).get(length)
        if cap is None or cap >= len(encoded_list):
            continue
        keep = set(np.linspace(0, len(encoded_list) - 1, cap).round().astype(int).tolist()) if cap > 0 else set()
        for index, encoded in enumerate(encoded_list):
            if index not in keep:
                skipped.append({"id": encoded.question.id, "tokens": encoded.num_tokens,
                                "reason": f"limit of {cap} at L{length}"})
        by_bucket[length] = [e for index, e in enumerate(encoded_list) if index in keep]
    return by_bucket, skipped


def range_report(checkpoint, lengths=BUCKET_LENGTHS, questions: list[Question] | None = None,
                 limit_per_bucket: dict | None = None, tensors: dict | None = None) -> dict:
    """Run the FP32 BC1S body over the fixture questions with recording hooks; return the per-site report.

    `tensors` replaces checkpoint.tensors (e.g. a copy with a planted outlier); the tokenizer and config stay."""
    if tensors is not None:
        from dataclasses import replace

        checkpoint = replace(checkpoint, tensors=tensors)
    started = time.perf_counter()
    by_bucket, skipped = plan_questions(checkpoint, lengths, questions, limit_per_bucket)
    recorder = RangeRecorder()
    timings = {}
    for length, encoded_list in by_bucket.items():
        if not encoded_list:
            continue
        t0 = time.perf_counter()
        body = BC1SBody(checkpoint.config, checkpoint.tensors, length).eval()
        handles = instrument(body, recorder)
        try:
            with torch.no_grad():
                for encoded in encoded_list:
                    inputs = _question_inputs(checkpoint, encoded, length)
                    valid = torch.zeros(length, dtype=torch.bool)
                    valid[:encoded.num_tokens] = True
                    active = torch.zeros(MARKER_SLOTS, dtype=torch.bool)
                    active[:len(encoded.marker_positions)] = True
                    recorder.set_question(valid, active, {"question": encoded.question.id, "bucket": length,
                                                          "tokens": encoded.num_tokens})
                    body(**{name: inputs[name] for name in body.input_names()})
        finally:
            for handle in handles:
                handle.remove()
        del body
        timings[str(length)] = round(time.perf_counter() - t0, 3)
    sites = {name: _site_entry(name, site) for name, site in sorted(recorder.sites.items(), key=lambda kv: kv[1].order)}
    report = {
        "fp16_max": FP16_MAX, "near_headroom": NEAR_HEADROOM, "mask_bias": MASK_BIAS,
        "matmul_cliff": {"cliff": MATMUL_CLIFF.name, "value": MATMUL_CLIFF.value, "sites": list(MATMUL_SITES),
                         "table": "run/mil/ane_cliffs.json"},
        "exp_underflow": {"fp16": FP16_EXP_UNDERFLOW, "fp32": FP32_EXP_UNDERFLOW},
        "mask_spread_limit_fp16": MASK_SPREAD_LIMIT, "score_clamp": SCORE_CLAMP,
        "reference": "FP32 torch BC1SBody (model/bc1s/models.py) on body_inputs, forward hooks; attention "
                     "intermediates reported by the attention module's analysis observer; gelu recomputed from the "
                     "input conv",
        "questions": {"fixture_sha256": fixture_sha256() if questions is None else None,
                      "lengths": sorted(int(x) for x in lengths),
                      "evaluated": sum(len(v) for v in by_bucket.values()),
                      "by_bucket": {str(k): len(v) for k, v in by_bucket.items()},
                      "ids_by_bucket": {str(k): [e.question.id for e in v] for k, v in by_bucket.items()},
                      "skipped": skipped},
        "attention_observations": recorder.attention_observations,
        "sites": sites,
        "layers": _summaries(sites, "layer"),
        "groups": _summaries(sites, "group"),
    }
    report["needs_clamp"] = needs_clamp(report)
    report["clamp"] = clamp_recommendations(report)
    report["verdict"] = worst(*(entry["verdict"] for entry in sites.values()))
    report["seconds"] = {"total": round(time.perf_counter() - started, 3), "by_bucket": timings}
    return report


# ---- evidence: what the benchmark script and reproduce write

FORMAT = "ane-engineering/evidence/fp16-range/1"
LABEL = "measurement (FP32 torch reference ranges over the fixture questions; no FP16 execution)"

# The layer-independent site groups printed in the summary table, in model order.
SUMMARY_GROUPS = ("embeddings", "embedding_norm", "encoder.attn_norm", "encoder.attn.q", "encoder.attn.k",
                  "encoder.attn.v", "encoder.attn.scores", "encoder.attn.heads", "encoder.attn.out",
                  "encoder.attn_residual", "encoder.mlp_norm", "encoder.mlp.input", "encoder.mlp.gate",
                  "encoder.mlp.product", "encoder.mlp.out", "encoder.residual", "final_norm", "head_input",
                  "head.attn.scores", "head.attn.out", "head.mlp.input", "head.mlp.product", "head.mlp.out",
                  "head.residual", "scorer.proj", "scorer.scores", "option_logits")
# A post-LN (BERT) encoder: the residual sums entering each norm are where the largest values live; their groups
# carry the norm's variance verdict.
SUMMARY_GROUPS_POST_LN = ("embedding_norm.input", "embedding_norm", "encoder.attn.q", "encoder.attn.k",
                          "encoder.attn.v", "encoder.attn.scores", "encoder.attn.heads", "encoder.attn.out",
                          "encoder.attn_norm.input", "encoder.attn_norm", "encoder.mlp.input", "encoder.mlp.product",
                          "encoder.mlp.out", "encoder.mlp_norm.input", "encoder.residual", "head_input",
                          "head.attn.scores",
                          "head.attn.out", "head.mlp.input", "head.mlp.product", "head.mlp.out", "head.residual",
                          "scorer.proj", "scorer.scores", "option_logits")


def expectation(source: str, report: dict) -> str:
    clamps = report["needs_clamp"]
    if source == "builtin:minilm-decision":
        outcome = "no clamp needed" if not clamps else f"clamp needed at {clamps}"
        return ("the encoder carries the trained all-MiniLM-L6-v2 weights (only the decision head is random), so "
                f"these are real-weight ranges: measured -> {outcome}; outlier channels per site are listed.")
    if source.startswith("builtin:"):
        outcome = "no clamp needed" if not clamps else f"{len(clamps)} site(s) need a clamp"
        return (f"{source} has random scaled-normal weights built to keep activations O(1) (checkpoint/builtin.py "
                "random_tensors; no trained outlier channels), so small ranges and no clamp are expected: measured "
                f"-> {outcome}. A trained ModernBERT-family checkpoint "
                "can carry 20-30k residual outliers; run this on it before trusting an FP16 package "
                "(tests/evidence/test_fp16_range.py shows a planted 30k outlier is flagged).")
    return "measured on the given checkpoint: " + ("no clamp needed" if not clamps else f"clamp needed at {clamps}")


def range_evidence(checkpoint, lengths=BUCKET_LENGTHS, limits: dict[int, int] | None = None,
                   load_seconds: float | None = None) -> dict:
    """The evidence JSON of one range analysis, with provenance."""
    from ..core.provenance import harness_fingerprint, machine, tool_versions

    report = range_report(checkpoint, lengths=lengths, limit_per_bucket=limits or None)
    subset = bool(limits) and any(s["reason"].startswith("limit") for s in report["questions"]["skipped"])
    return {
        "format": FORMAT,
        "benchmark": "FP16 range analysis of the BC1S body (largest |activation| per site vs the Neural Engine cliff "
                     "it faces: the matmul cliff for conv and einsum outputs, 65,504 for the rest)",
        "label": LABEL,
        "source": checkpoint.source,
        "method": __doc__,
        "question_subset": ({"limits": {str(k): v for k, v in limits.items()},
                             "note": "a subset of the fixture questions (evenly spaced per bucket) to bound the "
                                     "FP32 runtime; the skipped ones are listed in report.questions.skipped"}
                            if subset else None),
        "expectation": expectation(checkpoint.source, report),
        "summary": {
            "verdict": report["verdict"], "needs_clamp": report["needs_clamp"], "clamp": report["clamp"],
            "groups": {name: report["groups"][name] for name in
                       (SUMMARY_GROUPS_POST_LN if checkpoint.config.encoder.post_norm else SUMMARY_GROUPS)
                       if name in report["groups"]},
        },
        "report": report,
        "timing": {"load_seconds": None if load_seconds is None else round(load_seconds, 3),
                   "analysis_seconds": report["seconds"], "torch_threads": torch.get_num_threads()},
        "provenance": {"checkpoint": checkpoint.hashes, "machine": machine(), "tools": tool_versions(),
                       "harness": harness_fingerprint()},
    }


def write_range_evidence(checkpoint, path, lengths=BUCKET_LENGTHS) -> dict:
    """Run the analysis and write its evidence to a new file (refused if it exists)."""
    import json

    from ..core.cli import atomic_file
    from ..core.torch_threads import single_torch_thread

    with single_torch_thread():  # many small FP32 ops: one thread spares them the thread hand-off
        evidence = range_evidence(checkpoint, lengths)
    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps(evidence, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return evidence


def summary_lines(evidence: Document) -> list[str]:
    """Markdown for ANE_BENCHMARKS.md: every figure printed through `evidence.fig` (a ledger's Evidence)."""
    summary = ("summary",)
    clamps = ", ".join(evidence.fig(*summary, "needs_clamp", i)
                       for i in range(len(evidence.value(*summary, "needs_clamp"))))
    lines = [f"Verdict **{evidence.fig(*summary, 'verdict')}**; sites needing a clamp: {clamps or 'none'}. "
             f"{evidence.fig('label')}.", "",
             ("| site group | max abs (valid tokens) | max abs (all columns) | headroom to its cliff (matmul "
              f"{evidence.fig('report', 'matmul_cliff', 'value', fmt='.0f')}, else "
              f"{evidence.fig('report', 'fp16_max', fmt='.0f')}) | verdict |"
              if "matmul_cliff" in evidence.value("report") else
              f"| site group | max abs (valid tokens) | max abs (all columns) | headroom to "
              f"{evidence.fig('report', 'fp16_max', fmt='.0f')} | verdict |"),
             "|---|---|---|---|---|"]
    for name, group in evidence.value(*summary, "groups").items():
        at = (*summary, "groups", name)
        room = evidence.fig(*at, "headroom_all", fmt=".1f") if "headroom_all" in group else "-"
        lines.append(f"| {name} | {evidence.fig(*at, 'max_abs_valid', fmt='.4g')} | "
                     f"{evidence.fig(*at, 'max_abs_all', fmt='.4g')} | {room} | {evidence.fig(*at, 'verdict')} |")
    return lines
