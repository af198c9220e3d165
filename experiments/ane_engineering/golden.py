"""`python -m experiments.ane_engineering.golden`: FP32 golden outputs of the reference model over the fixture.

`--task decisions` (the default for a source with a decision head) stores per question the raw option logits,
calibrated probabilities, action logits and probabilities, decisions and token usage. `--task embeddings` (the
default for an encoder-only source) stores per text (question texts and package/inputs/fixtures/sentences.json, or
the texts of `--fixture FILE` in the sentences.json format) the mean-pooled, L2-normalised FP32 sentence embedding,
for validating embedding-kind packages. Both record the fixture hash and the source hashes; `validate` and `sweep`
take the same `--fixture` and refuse a golden made from another. Committed held-out sets:
package/inputs/fixtures/questions_heldout.json and texts_heldout.json. Refuses an existing output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .core.cli import UsageError, atomic_file, run_main
from .core.staging import check_output
from .package.inputs.questions import FIXTURE_PATH, load_questions
from .validation.golden import make_golden


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.golden", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("--task", choices=("decisions", "embeddings"),
                        help="decisions (needs a decision head) or sentence embeddings (default: decisions if the "
                             "source has a decision head, else embeddings)")
    parser.add_argument("--fixture", type=Path, default=FIXTURE_PATH,
                        help="question fixture (default: the committed one)")
    parser.add_argument("--adapter", type=Path, help="LoRA adapter (safetensors) merged into the weights first: the "
                                                     "golden for validating a package run with that adapter")
    parser.add_argument("--output", required=True, type=Path, help="new JSON file (refused if it exists)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_output(args.output, [args.adapter, args.fixture, local_source_directory(args.source)])
    checkpoint = load_checkpoint(args.source)
    task = args.task or ("decisions" if checkpoint.config.head is not None else "embeddings")
    if task == "embeddings":
        return write_embedding_golden(checkpoint, args)
    if args.adapter is not None:
        from .package.inputs.adapter import load_adapter, merge

        checkpoint = merge(checkpoint, load_adapter(args.adapter, checkpoint.config))
    with tqdm(total=len(load_questions(args.fixture)), desc="golden (FP32 reference)", unit="question",
              file=sys.stderr) as bar:
        golden = make_golden(checkpoint, args.fixture, progress=lambda _: bar.update())
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.output}: {len(golden['questions'])} questions from {checkpoint.source} "
          f"(weights {checkpoint.weights_sha256[:12]}...)")
    return 0


def write_embedding_golden(checkpoint, args) -> int:
    from .package.inputs.texts import texts_of
    from .validation.embedding_golden import make_embedding_golden

    if args.adapter is not None:
        raise UsageError("--task embeddings takes no --adapter")
    # --fixture for embeddings: a text file in the sentences.json format; its default stands for the default texts
    fixture = None if args.fixture == FIXTURE_PATH else args.fixture
    with tqdm(total=len(texts_of(fixture)[0]), desc="golden embeddings (FP32 reference)", unit="text",
              file=sys.stderr) as bar:
        golden = make_embedding_golden(checkpoint, progress=lambda _: bar.update(), fixture=fixture)
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.output}: {len(golden['embeddings'])} embeddings ({len(golden['texts']['skipped'])} texts "
          f"skipped) from {checkpoint.source} (weights {checkpoint.weights_sha256[:12]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
