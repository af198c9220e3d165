"""The tensor layout of a BERT-family checkpoint, with transformers' names (`BertModel.save_pretrained`).

Names are bare (`embeddings.word_embeddings.weight`, `encoder.layer.N.attention.self.query.weight`, ...) or carry
the `bert.` prefix of BertForMaskedLM / BertForPreTraining checkpoints. Tensors that are not part of the encoder's
final hidden states are ignored, each with the reason (Checkpoint.notes): the pooler (a tanh dense layer on [CLS]
for next-sentence prediction; the harness returns hidden states or mean-pooled embeddings), the masked-LM and
next-sentence heads (`cls.*`), and the int64 `embeddings.position_ids` buffer (the positions 0..P-1, implied).
"""

from __future__ import annotations

from .bert_config import BertEncoderConfig

BERT_PREFIX = "bert."
POSITION_IDS = "embeddings.position_ids"


def bert_layer_prefix(index: int) -> str:
    return f"encoder.layer.{index}"


def expected_bert_tensors(enc: BertEncoderConfig) -> dict[str, tuple[int, ...]]:
    c, i = enc.hidden_size, enc.intermediate_size
    names: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (enc.vocab_size, c),
        "embeddings.position_embeddings.weight": (enc.max_position_embeddings, c),
        "embeddings.token_type_embeddings.weight": (enc.type_vocab_size, c),
        "embeddings.LayerNorm.weight": (c,), "embeddings.LayerNorm.bias": (c,),
    }
    for n in range(enc.num_hidden_layers):
        p = bert_layer_prefix(n)
        for dense, shape in ((f"{p}.attention.self.query", (c, c)), (f"{p}.attention.self.key", (c, c)),
                             (f"{p}.attention.self.value", (c, c)), (f"{p}.attention.output.dense", (c, c)),
                             (f"{p}.intermediate.dense", (i, c)), (f"{p}.output.dense", (c, i))):
            names[f"{dense}.weight"], names[f"{dense}.bias"] = shape, shape[:1]
        for norm in (f"{p}.attention.output.LayerNorm", f"{p}.output.LayerNorm"):
            names[f"{norm}.weight"], names[f"{norm}.bias"] = (c,), (c,)
    return names


def bert_ignored(name: str, prefixed: bool) -> str | None:
    """Why a stored tensor that is not part of the encoder is ignored, or None if it is not ignorable."""
    bare = name[len(BERT_PREFIX):] if prefixed and name.startswith(BERT_PREFIX) else name
    if bare.startswith("pooler."):
        return "pooler (tanh dense layer on [CLS] for next-sentence prediction; not part of the hidden states)"
    if bare == POSITION_IDS:
        return "int64 buffer of the positions 0..P-1 (implied by the position table; never loaded)"
    if prefixed and name.startswith("cls."):
        return "masked-LM / next-sentence head (not part of the encoder)"
    return None
