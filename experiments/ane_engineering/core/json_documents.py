"""Every JSON document the harness reads goes through `read_json(path, schema)`: strict parsing, then one schema.

Why `jsonschema` (Draft 2020-12): the documents are plain data (config.json, shard indexes, fixtures, goldens,
manifests, pins, evidence), and a JSON Schema states their structure as data beside the code that reads them, in a
standard anyone can check with any validator; every error carries the JSON path of the value it is about. (pydantic
would tie each document to a class and coerce values unless told not to; the harness wants refusal, not coercion.)

Parsing refuses what `json.loads` would let through or crash on, naming the file: bytes that are not UTF-8,
NaN/Infinity literals and number literals that overflow to infinity (JSON has no non-finite numbers), duplicate
keys (the last one would silently win), lone surrogates in strings, and nesting deeper than MAX_NESTING (Python's
parser raises RecursionError near 1,000 levels; no document here needs more than a few).

tokenizer.json is the one exception: the tokenizers library defines that format and checks it when it loads it.

Every document is read as a regular file of at most MAX_JSON_BYTES (core/limits.py) before it is parsed: a FIFO is
refused instead of waited on, /dev/zero instead of read until memory runs out.

The schemas use two strict types: "integer" is an int and never a bool or 4.0; "number" is an int or a finite float,
and where only a number is allowed the int must fit in a float (10**400 in a float field is refused, so it cannot
reach float() and overflow; as an integer it still meets the field's bounds, which compare it exactly). A refusal names
the file, the JSON path and the field: "config.json decision_head: field 'num_layers' must be at most 16384 (...)".
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from .errors import HarnessError
from .limits import MAX_JSON_BYTES
from .regular_files import read_regular

MAX_NESTING = 64  # levels of objects/arrays; the deepest document the harness writes has fewer than 10
ANY_OBJECT = {"type": "object"}


class DocumentError(HarnessError):
    """A JSON document that is not what the harness reads."""


class _Refused(HarnessError):
    """Raised inside json.loads hooks; turned into the caller's error class with the file named."""


def read_json(path: Path | str, schema: dict, error: type[HarnessError] = DocumentError,
              where: str | None = None) -> Any:
    """Read, parse strictly and validate the JSON file `path` against `schema`; refuse with `error` naming it."""
    where = where or str(path)
    data = read_regular(Path(path), MAX_JSON_BYTES, "JSON document", error=error, name=where)
    value = parse_json(data, where, error)
    # Validation is a function of the bytes and the schema: the same bytes already passed this schema need no second
    # pass (the fixture and the committed golden are read many times in one process).
    key = (hashlib.sha256(data).digest(), id(schema))
    if key not in _PASSED or _validator(schema) is not _PASSED[key]:
        check(value, schema, where, error)
        _PASSED[key] = _validator(schema)
    return value


def parse_json(data: bytes | str, where: str, error: type[HarnessError] = DocumentError) -> Any:
    """Strict json.loads (see the module docstring); no schema."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as problem:
            raise error(f"{where}: not UTF-8 text (invalid byte at offset {problem.start})") from problem
    try:
        value = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float,
                           object_pairs_hook=_unique_keys)
    except _Refused as problem:
        raise error(f"{where}: {problem}") from None
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_NESTING} levels deep") from None
    except json.JSONDecodeError as problem:
        raise error(f"{where}: not valid JSON ({problem.msg} at line {problem.lineno} column "
                    f"{problem.colno})") from None
    except ValueError as problem:  # e.g. an integer literal longer than Python's int/str conversion limit
        raise error(f"{where}: not valid JSON ({problem})") from None
    _check_nesting_and_strings(value, where, error)
    return value


def _refuse_constant(name: str):
    raise _Refused(f"{name} is not a JSON number (non-finite values are refused)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:40]} overflows to infinity")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key[:60]!r} appears twice in one object")
        out[key] = value
    return out


def _check_nesting_and_strings(value: Any, where: str, error: type[HarnessError]) -> None:
    """Iterative walk (no recursion to exhaust): depth at most MAX_NESTING, every string valid Unicode."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, str):
                _require_unicode(item, where, error)
            continue
        if depth > MAX_NESTING:
            raise error(f"{where}: nested more than {MAX_NESTING} levels deep")
        stack.extend((child, depth + 1) for child in children)


def _require_unicode(text: str, where: str, error: type[HarnessError]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as problem:
        raise error(f"{where}: string {_short(text)} holds a lone surrogate (\\u{ord(text[problem.start]):04x}); "
                    "it is not Unicode text") from None


# ----------------------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------------------
_VALIDATORS: dict[int, tuple[dict, Any]] = {}
_PASSED: dict[tuple[bytes, int], Any] = {}  # (sha256 of a file's bytes, id of a schema) -> the validator it passed


def _is_integer(checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker, instance) -> bool:
    if isinstance(instance, float):
        return math.isfinite(instance)
    return _is_integer(checker, instance)  # of any size, so bounds (maximum, ...) still compare it exactly


def _float_can_hold(instance) -> bool:
    return not _is_integer(None, instance) or abs(instance) <= sys.float_info.max


@functools.cache
def _strict_validator_class():
    """Draft 2020-12 with the strict integer/number types (module docstring); jsonschema is imported on first use."""
    from jsonschema import Draft202012Validator, ValidationError, validators

    standard_type = Draft202012Validator.VALIDATORS["type"]

    def type_keyword(validator, types, instance, schema):
        """The standard check, plus: a value that may only be a number must fit in a float."""
        yield from standard_type(validator, types, instance, schema)
        wanted = [types] if isinstance(types, str) else types
        if "number" in wanted and "integer" not in wanted and not _float_can_hold(instance):
            yield ValidationError(f"{len(str(abs(instance)))}-digit integer is not a float")

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    return validators.extend(Draft202012Validator, validators={"type": type_keyword}, type_checker=checker)


def _validator(schema: dict):
    """One validator per schema (schemas are module-level constants)."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = _VALIDATORS[id(schema)] = (schema, _strict_validator_class()(schema))
    return cached[1]


def check(value: Any, schema: dict, where: str, error: type[HarnessError] = DocumentError) -> Any:
    """`value` if it matches `schema`, else `error` with a message naming `where`, the JSON path and the field."""
    from jsonschema.exceptions import best_match

    problem = best_match(_validator(schema).iter_errors(value))
    if problem is not None:
        raise error(describe(problem, where))
    return value


def json_path(parts) -> str:
    """['decision_head', 'action_head', 'actions', 1] -> 'decision_head.action_head.actions[1]'."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "a boolean",
               "array": "a list", "object": "an object", "null": "null"}


def describe(problem, where: str) -> str:
    """One line from a jsonschema ValidationError: '<where> <object path>: field '<name>' <what is wrong>'."""
    path = list(problem.absolute_path)
    kind, expected, value, schema = problem.validator, problem.validator_value, problem.instance, problem.schema
    if kind in ("required", "additionalProperties"):  # about the fields of the object at `path`
        location = f"{where} {json_path(path)}" if path else where
        if kind == "required":
            missing = [key for key in expected if key not in value]
            return f"{location}: missing required field '{missing[0]}'"
        known = set(schema.get("properties", {}))
        return f"{location}: unknown field(s) {sorted(k for k in value if k not in known)}"
    keys = [i for i, part in enumerate(path) if isinstance(part, str)]
    if not keys:
        subject, location = ("top level" if not path else f"entry {json_path(path)}"), where
    else:
        last = keys[-1]
        location = f"{where} {json_path(path[:last])}" if last else where
        entry = json_path(path[last + 1:])
        subject = f"field '{path[last]}'" + (f" entry {entry}" if entry else "")
    reason = f" ({schema['description']})" if "description" in schema else ""
    return f"{location}: {subject} {_problem(kind, expected, value, reason)}"


def _problem(kind: str, expected, value, reason: str) -> str:
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        if "number" in wanted and not _float_can_hold(value):
            return f"must be a number a float can hold, got an integer of {len(str(abs(value)))} digits"
        return f"must be {' or '.join(_TYPE_NAMES[t] for t in wanted)}, got {_type_name(value)} {_short(value)}"
    if kind == "enum":
        return f"{_short(value)} is not supported (known: {', '.join(map(repr, expected))})"
    if kind == "const":
        return f"{_short(value)} is not supported (expected {expected!r})"
    if kind == "exclusiveMinimum":
        return (f"must be a positive number, got {_short(value)}" if expected == 0
                else f"must be greater than {expected}, got {_short(value)}")
    if kind == "minimum":
        return f"must be at least {expected}, got {_short(value)}"
    if kind in ("maximum", "exclusiveMaximum"):  # a cap: the description says where it comes from
        return f"must be {'at most' if kind == 'maximum' else 'less than'} {expected}{reason}, got {_short(value)}"
    if kind in ("minItems", "maxItems"):
        return f"must list {'at least' if kind == 'minItems' else 'at most'} {expected} entries, got {len(value)}"
    if kind == "uniqueItems":
        return f"must not repeat an entry, got {_short(value)}"
    if kind == "minProperties":
        return "must not be empty" if expected == 1 else f"must have at least {expected} fields"
    if kind == "minLength":
        return "must not be empty" if expected == 1 else f"must be at least {expected} characters long"
    if kind in ("maxLength", "pattern"):
        return f"{_short(value)} is not {schema_text(kind, expected, reason)}"
    return f"{_short(value)} is invalid ({kind} {expected!r})"


def schema_text(kind: str, expected, reason: str) -> str:
    if reason:
        return reason.strip(" ()")
    return f"at most {expected} characters long" if kind == "maxLength" else f"of the form {expected}"


def _type_name(value) -> str:
    return {dict: "object", list: "list", type(None): "null"}.get(type(value), type(value).__name__)


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------------------------------------------------
# Schema building blocks used by the documents' schemas
# ----------------------------------------------------------------------------------------------------------------
def closed_object(required: dict, optional: dict | None = None, **extra) -> dict:
    """An object with exactly these fields (required ones and optional ones); anything else is refused."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})},
            "additionalProperties": False, **extra}


def open_object(required: dict, optional: dict | None = None, **extra) -> dict:
    """An object with these fields checked; other fields are allowed and not read."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}, **extra}


def array_of(items: dict, min_items: int = 0, **extra) -> dict:
    return {"type": "array", "items": items, "minItems": min_items, **extra}


STRING = {"type": "string"}
NON_EMPTY_STRING = {"type": "string", "minLength": 1}
BOOLEAN = {"type": "boolean"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
POSITIVE_NUMBER = {"type": "number", "exclusiveMinimum": 0}
NON_NEGATIVE_INTEGER = {"type": "integer", "minimum": 0}
POSITIVE_INTEGER = {"type": "integer", "minimum": 1}
SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "a SHA-256 in 64 lowercase hex digits"}
