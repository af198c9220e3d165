"""The chip table (chips.json): each chip's Neural Engine FP16 peak, attainable bandwidth, on-chip SRAM and generation
with their sources, read and checked once; chip names as the table keys them (lower case, hyphens: "m3-max")."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import HarnessError
from ..core.json_documents import POSITIVE_NUMBER, STRING, open_object, read_json

CHIPS_PATH = Path(__file__).resolve().parent / "chips.json"


class ChipTableError(HarnessError):
    """A chip table that does not say what the cost model needs."""


_OPTIONAL_NUMBER = {"anyOf": [POSITIVE_NUMBER, {"type": "null"}]}
CHIP = open_object({"name": STRING, "peak_fp16_tflops": _OPTIONAL_NUMBER, "ane_bandwidth_gbs": POSITIVE_NUMBER,
                    "fp16_basis": STRING, "bandwidth_source": STRING, "sram_mb": POSITIVE_NUMBER, "sram_source": STRING,
                    "generation": {"type": "string", "pattern": "^M[0-9]+$"}},
                   {"peak_fp16_tflops_if_int8_counted": _OPTIONAL_NUMBER, "assumed_peak_fp16_tflops": POSITIVE_NUMBER,
                    "assumed_peak_basis": STRING})
CHIP_KEY = "^[a-z0-9]+(-[a-z0-9]+)*$"
CHIPS_SCHEMA = open_object({"chips": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": CHIP_KEY},
                                      "additionalProperties": CHIP}})


def load_chips(path: Path | str = CHIPS_PATH) -> dict:
    """The chip table (chips.json): {key: {name, peak_fp16_tflops, ane_bandwidth_gbs, ...sources}}, keys lower-case
    with hyphens ("m3-max"). A chip whose FP16 peak no public source gives has peak_fp16_tflops null and an
    assumed_peak_fp16_tflops with its basis (required: the schema check below refuses a null peak without one)."""
    chips = read_json(path, CHIPS_SCHEMA)["chips"]
    for key, chip in chips.items():
        if chip["peak_fp16_tflops"] is None and "assumed_peak_fp16_tflops" not in chip:
            raise ChipTableError(f"{path}: chip {key} has no peak_fp16_tflops and no assumed_peak_fp16_tflops")
    return chips


def chip_key(name: str) -> str:
    """The table key of a chip name: "M3 Max" and "m3-max" are both m3-max."""
    return "-".join(name.strip().lower().replace("_", " ").split())


def effective_peak(chip: dict) -> tuple[float, bool]:
    """(FP16 peak the floor divides by, whether it is the table's stated assumption rather than a sourced figure)."""
    if chip["peak_fp16_tflops"] is not None:
        return chip["peak_fp16_tflops"], False
    return chip["assumed_peak_fp16_tflops"], True
