"""The one JSON reader: strict parsing and schema checks refuse hostile documents with one line naming file and path."""

from __future__ import annotations

import pytest

from command_support import REPO
from experiments.ane_engineering.core.errors import HarnessError
from experiments.ane_engineering.core.json_documents import (
    INTEGER,
    MAX_NESTING,
    NUMBER,
    POSITIVE_NUMBER,
    DocumentError,
    array_of,
    check,
    closed_object,
    parse_json,
    read_json,
)

SCHEMA = closed_object({"size": {**INTEGER, "minimum": 1, "maximum": 16384, "description": "a device dimension"},
                        "scale": POSITIVE_NUMBER},
                       {"names": array_of({"type": "string"}, 1, uniqueItems=True), "shift": NUMBER})


def refused(text, schema=SCHEMA) -> str:
    with pytest.raises(DocumentError) as caught:
        check(parse_json(text, "doc.json"), schema, "doc.json")
    message = str(caught.value)
    assert message.startswith("doc.json") and "\n" not in message
    return message


def test_a_good_document_passes_unchanged():
    assert check(parse_json(b'{"size": 8, "scale": 2, "names": ["a"]}', "doc.json"), SCHEMA, "doc.json") == \
        {"size": 8, "scale": 2, "names": ["a"]}


@pytest.mark.parametrize("text, message", [
    (b"\xff\xfe{}", r"not UTF-8 text \(invalid byte at offset 0\)"),
    ('{"size": NaN, "scale": 1}', r"NaN is not a JSON number"),
    ('{"size": 1, "scale": -Infinity}', r"-Infinity is not a JSON number"),
    ('{"size": 1, "scale": 1e400}', r"number 1e400 overflows to infinity"),
    ('{"size": 1, "size": 2, "scale": 1}', r"key 'size' appears twice"),
    ('{"size": 1, "scale": 1, "names": ["\\ud800"]}', r"lone surrogate"),
    ('{"size": 1,', r"not valid JSON"),
    ("[" * 200_000 + "]" * 200_000, rf"nested more than {MAX_NESTING} levels deep"),
    ("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1), rf"nested more than {MAX_NESTING} levels deep"),
    ('{"size": 1, "scale": 1, "x": ' + "9" * 5000 + "}", r"not valid JSON"),
])
def test_parsing_refuses_what_json_loads_would_accept_or_crash_on(text, message):
    import re

    assert re.search(message, refused(text))


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "doc.json: top level must be an object, got list"),
    ('{"size": 1}', "doc.json: missing required field 'scale'"),
    ('{"size": 1, "scale": 1, "extra": 0}', "doc.json: unknown field(s) ['extra']"),
    ('{"size": true, "scale": 1}', "doc.json: field 'size' must be an integer, got bool True"),
    ('{"size": 4.0, "scale": 1}', "doc.json: field 'size' must be an integer, got float 4.0"),
    ('{"size": 100000, "scale": 1}', "doc.json: field 'size' must be at most 16384 (a device dimension), got 100000"),
    ('{"size": 1, "scale": 0}', "doc.json: field 'scale' must be a positive number, got 0"),
    ('{"size": 1, "scale": 1' + "0" * 400 + "}", ("doc.json: field 'scale' must be a number a float can hold, "
                                                  "got an integer of 401 digits")),
    ('{"size": 1, "scale": 1, "names": "abc"}', "doc.json: field 'names' must be a list, got str 'abc'"),
    ('{"size": 1, "scale": 1, "names": []}', "doc.json: field 'names' must list at least 1 entries, got 0"),
    ('{"size": 1, "scale": 1, "names": ["a", 3]}', "doc.json: field 'names' entry [1] must be a string, got int 3"),
    ('{"size": 1, "scale": 1, "names": ["a", "a"]}', "doc.json: field 'names' must not repeat an entry"),
])
def test_schema_refusals_name_the_file_the_path_and_the_field(text, message):
    assert refused(text).startswith(message)


def test_nested_paths_are_named():
    schema = closed_object({"outer": closed_object({"inner": array_of(closed_object({"x": INTEGER}))})})
    message = refused('{"outer": {"inner": [{"x": 1}, {"x": "no"}]}}', schema)
    assert message.startswith("doc.json outer.inner[1]: field 'x' must be an integer, got str 'no'")


def test_read_json_names_the_file_and_raises_the_callers_error_class(tmp_path):
    class MyError(HarnessError):
        pass

    path = tmp_path / "doc.json"
    with pytest.raises(MyError, match=r"doc\.json: cannot read"):
        read_json(path, SCHEMA, MyError)
    path.write_text('{"size": 0, "scale": 1}')
    with pytest.raises(MyError, match=rf"{path}: field 'size' must be at least 1"):
        read_json(path, SCHEMA, MyError)


def test_a_file_that_changes_after_passing_is_checked_again(tmp_path):
    """read_json skips a second validation only for the very same bytes."""
    path = tmp_path / "doc.json"
    path.write_text('{"size": 1, "scale": 1}')
    assert read_json(path, SCHEMA) == read_json(path, SCHEMA) == {"size": 1, "scale": 1}
    path.write_text('{"size": 0, "scale": 1}')
    with pytest.raises(DocumentError, match="field 'size' must be at least 1"):
        read_json(path, SCHEMA)


def test_every_declared_schema_is_valid_draft_2020_12():
    """Every module-level *_SCHEMA in the harness is itself a valid Draft 2020-12 schema."""
    import importlib

    from jsonschema import Draft202012Validator

    root = REPO
    package = root / "experiments" / "ane_engineering"
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "_SCHEMA" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
        found.update({f"{module.__name__}.{name}": value for name, value in vars(module).items()
                      if name.endswith("_SCHEMA") and isinstance(value, dict)})
    assert found
    for name, schema in found.items():
        Draft202012Validator.check_schema(schema)
