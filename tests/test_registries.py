"""The registries where things are many: the ANE rules (placement/rules/), the executor's ops (run/mil/) and the
model families (checkpoint/config.py FAMILIES); and the test tree mirrors the first two, one test module per op family
and per rule module.

Each is complete (every check written is registered, every op module's handlers are in OPS) and well formed (every
rule has a statement, a source and a severity or a reason it does not apply; every op's opsets are a range of known
opsets, and a narrower range is exactly where coremltools defines the op), and a broken registration is refused
without changing the registry.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import pytest

from experiments.ane_engineering.checkpoint.config import FAMILIES
from experiments.ane_engineering.placement import rules as rules_package
from experiments.ane_engineering.placement.rules import (
    CATALOGUE,
    RULES,
    SEVERITIES,
    Orion,
    catalogue,
    documented,
    rule,
)
from experiments.ane_engineering.placement.rules import registry as rule_registry
from experiments.ane_engineering.run.mil import ops as ops_package
from experiments.ane_engineering.run.mil import registry as op_registry
from experiments.ane_engineering.run.mil.registry import (
    OPS,
    OPSETS,
    opset_range,
    register,
)

CHECK_MODULES = [importlib.import_module(f"{rules_package.__name__}.{m.name}")
                 for m in pkgutil.iter_modules(rules_package.__path__)]
OP_MODULES = {m.name for m in pkgutil.iter_modules(ops_package.__path__)}


# ---------------------------------------------------------------------------------------------------------- rules
def test_rule_catalogue_is_every_registered_rule_by_number():
    assert CATALOGUE == catalogue() and {r.id for r in CATALOGUE} == RULES.keys()
    assert [r.number for r in CATALOGUE] == list(range(1, len(CATALOGUE) + 1)), "rule numbers have a gap"
    for r in CATALOGUE:
        assert r.statement.strip() and r.source.strip(), r.id
        if r.applicable:
            assert r.severity in SEVERITIES and callable(r.check), r.id
        else:
            assert r.severity is None and r.check is None and r.orion.reason.strip(), r.id


def test_every_check_written_is_a_registered_rule():
    """A check function left undecorated would never run: every `check_*` of the rule modules is a rule's check."""
    registered = {r.check.func for r in CATALOGUE if r.check is not None}
    written = {fn for module in CHECK_MODULES for name, fn in vars(module).items()
               if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__}
    assert written == registered
    for r in CATALOGUE:
        if r.check is not None:
            assert r.check.keywords == {"rule_id": r.id}, r.id  # the check reports under its own id


def _good(ctx, rule_id):
    return []


@pytest.mark.parametrize("rule_id, kwargs, message", [
    ("ANE-R90-x", dict(statement="s", source="src", severity="fatal"), "severity 'fatal'"),
    ("ANE-R90-x", dict(statement="s", source=" ", severity="error"), "public source"),
    ("ANE-R90-x", dict(statement="", source="src", severity="error"), "states what it asks"),
    ("R90-x", dict(statement="s", source="src", severity="error"), "not of the form"),
    ("ANE-R01-rank", dict(statement="s", source="src", severity="error"), "clashes with the registered 'ANE-R01-rank'"),
    ("ANE-R01-other", dict(statement="s", source="src", severity="warning"),
     "clashes with the registered 'ANE-R01-rank'"),
    ("ANE-R90-x", dict(statement="s", source="src", severity=None), "has a check and a severity"),
    ("ANE-R90-x", dict(statement="s", source="Orion", severity="error", orion=Orion("not applicable", "why")),
     "has a check and a severity"),
])
def test_a_broken_rule_registration_is_refused(monkeypatch, rule_id, kwargs, message):
    before = dict(RULES)
    monkeypatch.setattr(rule_registry, "RULES", dict(RULES))
    with pytest.raises(ValueError, match=message):
        rule(rule_id, **kwargs)(_good)
    assert rule_registry.RULES == before


def test_a_documented_rule_that_would_apply_is_refused(monkeypatch):
    monkeypatch.setattr(rule_registry, "RULES", dict(RULES))
    with pytest.raises(ValueError, match="has a check and a severity"):
        documented("ANE-R90-x", statement="s", source="Orion", orion=Orion("enforced", "checked"))
    with pytest.raises(ValueError, match="orion status"):
        Orion("maybe", "why")


def test_a_well_formed_new_rule_is_one_decorated_function(monkeypatch):
    monkeypatch.setattr(rule_registry, "RULES", dict(RULES))

    @rule("ANE-R90-new", statement="A new rule.", source="a public source", severity="warning")
    def check_new(ctx, rule_id):
        return [rule_id]

    added = rule_registry.catalogue()[-1]
    assert added.id == "ANE-R90-new" and added.check("ctx") == ["ANE-R90-new"] and check_new.__name__ == "check_new"


# ------------------------------------------------------------------------------------------------------------ ops
def test_every_registered_op_has_a_range_of_known_opsets():
    assert OPS, "importing run/mil/ops registers the handlers"
    for op_type, op_def in OPS.items():
        assert op_def.op_type == op_type and op_def.family in OP_MODULES, op_type
        assert op_def.opsets, op_type
        first = OPSETS.index(op_def.opsets[0])
        assert op_def.opsets == OPSETS[first:first + len(op_def.opsets)], f"{op_type}: {op_def.opsets}"
        inspect.signature(op_def.handler).bind("node", "args", "num")
        if op_def.prepare is not None:
            inspect.signature(op_def.prepare).bind("node", "const_args", "num")


def test_every_op_module_registers_what_it_defines():
    """Each module under ops/ registers at least one handler, and no handler of it is left unregistered."""
    handlers = {d.handler for d in OPS.values()}
    for name in OP_MODULES - {"common"}:
        module = importlib.import_module(f"{ops_package.__name__}.{name}")
        assert any(d.family == name for d in OPS.values()), name
        written = [fn for attr, fn in vars(module).items()
                   if attr.startswith("op_") and inspect.isfunction(fn) and fn.__module__ == module.__name__]
        assert all(fn in handlers for fn in written), [fn.__name__ for fn in written if fn not in handlers]


def test_a_narrower_range_is_where_coremltools_defines_the_op():
    """An op registered for fewer than every opset states its range: it must be the opsets where coremltools
    defines the op (coremltools' own registry), so the executor neither refuses a valid program nor claims one."""
    pytest.importorskip("coremltools")
    from experiments.ane_engineering.run.mil.op_table import core_ops_by_opset

    core = core_ops_by_opset()
    narrowed = {op: d.opsets for op, d in OPS.items() if d.opsets != OPSETS}
    assert {"fill_like", "slice_update", "resize", "quantize", "scaled_dot_product_attention"} <= narrowed.keys()
    for op, opsets in narrowed.items():
        assert opsets == tuple(o for o in OPSETS if op in core[o]), op


def test_opset_ranges():
    assert opset_range() == OPSETS
    assert opset_range(since="iOS16") == ("iOS16", "iOS17", "iOS18")
    assert opset_range(until="iOS16") == ("iOS15", "iOS16")
    assert opset_range(since="iOS16", until="iOS17") == ("iOS16", "iOS17")
    assert opset_range(opsets=("iOS18", "iOS15")) == ("iOS15", "iOS18")


def _handler(node, args, num):
    return args["x"]


@pytest.mark.parametrize("op_types, kwargs, handler, message", [
    (("new_op",), dict(since="iOS14"), _handler, "unknown opsets"),
    (("new_op",), dict(opsets=("iOS15", "macOS99")), _handler, "unknown opsets"),
    (("new_op",), dict(since="iOS18", until="iOS16"), _handler, "covers no opset"),
    (("new_op",), dict(opsets=("iOS16",), since="iOS16"), _handler, "not both"),
    (("new_op",), dict(), lambda node, args: 0, "must take"),
    (("new_op",), dict(prepare=lambda node: None), _handler, "must take"),
    ((), dict(), _handler, "at least one"),
    (("relu",), dict(), _handler, "registered twice"),
    (("new_op", "relu"), dict(), _handler, "registered twice"),  # and new_op is not registered either
])
def test_a_broken_op_registration_is_refused(monkeypatch, op_types, kwargs, handler, message):
    before = dict(OPS)
    monkeypatch.setattr(op_registry, "OPS", dict(OPS))
    with pytest.raises(ValueError, match=message):
        register(*op_types, **kwargs)(handler)
    assert op_registry.OPS == before


# ------------------------------------------------------------------------------------------------------- families
TRAITS = ("family", "post_norm", "has_sliding_layers", "has_position_table", "supports_lora")


def test_each_family_is_registered_under_its_own_name_and_answers_every_trait():
    """FAMILIES is the one map from model_type to a family: each parser returns the config class of that name."""
    for model_type, parser in FAMILIES.items():
        config_class = typing.get_type_hints(parser)["return"]
        assert config_class.family == model_type
        assert all(hasattr(config_class, trait) for trait in TRAITS), config_class


# ----------------------------------------------------------------------------------------------------------------
# Tests mirror the registries: one test module per op family and per rule module, and no test module of a module
# that is not there (a renamed module leaves its tests behind otherwise).
# ----------------------------------------------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent
HELPER_MODULES = {"common", "__init__"}  # ops/common.py: helpers of the families, no op of its own


@pytest.mark.parametrize("package, tests", [(ops_package, TESTS / "run" / "mil" / "ops"),
                                            (rules_package, TESTS / "placement" / "rules")],
                         ids=["op families", "rule modules"])
def test_every_module_has_a_test_module_and_every_test_module_a_module(package, tests):
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)} - HELPER_MODULES
    tested = {path.stem.removeprefix("test_") for path in tests.glob("test_*.py")}
    assert sorted(modules - tested) == [], f"no tests/{tests.relative_to(TESTS)}/test_<module>.py for these"
    assert sorted(tested - modules) == [], f"test modules in tests/{tests.relative_to(TESTS)} of no module"
