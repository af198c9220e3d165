"""Placement as Core ML plans it (macOS only): coremltools' MLComputePlan, per operation.

For each operation of the compiled program: its preferred compute device, the devices that support it and the
estimated cost. Counts: non-constant operations that prefer the Neural Engine, and constants. Elsewhere this
returns `available: false` with the reason; it never guesses a plan (the static rules in static_check.py are the
labelled prediction used off macOS).
"""

from __future__ import annotations

import platform
import tempfile
from collections import Counter
from pathlib import Path

COMPUTE_UNITS = ("CPU_AND_NE", "CPU_ONLY", "CPU_AND_GPU", "ALL")
CONSTANT_OPERATORS = ("const",)


def _device_name(device) -> str:
    from coremltools.models import compute_device

    if isinstance(device, compute_device.MLNeuralEngineComputeDevice):
        return "NeuralEngine"
    if isinstance(device, compute_device.MLGPUComputeDevice):
        return "GPU"
    if isinstance(device, compute_device.MLCPUComputeDevice):
        return "CPU"
    return type(device).__name__


def unavailable_reason() -> str | None:
    if platform.system() != "Darwin":
        return f"MLComputePlan needs macOS (coremltools: 'MLComputePlan is not supported' on {platform.system()})"
    return None


def compute_plan(package: Path, compute_units: str = "CPU_AND_NE") -> dict:
    """Per-op plan of a saved .mlpackage under `compute_units`, or {"available": False, "reason": ...}."""
    reason = unavailable_reason()
    if reason:
        return {"available": False, "reason": reason, "compute_units": compute_units}
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan
    from coremltools.models.utils import compile_model

    with tempfile.TemporaryDirectory() as scratch:
        compiled = compile_model(str(package), str(Path(scratch) / "model.mlmodelc"))
        plan = MLComputePlan.load_from_path(compiled, compute_units=getattr(ct.ComputeUnit, compute_units))
        program = plan.model_structure.program
        if program is None:
            return {"available": False, "reason": "not an ML Program", "compute_units": compute_units}
        ops, preferred = [], Counter()
        constants = 0
        for operation in program.functions["main"].block.operations:
            if operation.operator_name in CONSTANT_OPERATORS:
                constants += 1
                continue
            usage = plan.get_compute_device_usage_for_mlprogram_operation(operation)
            cost = plan.get_estimated_cost_for_mlprogram_operation(operation)
            entry = {
                "operator": operation.operator_name,
                "outputs": [o.name for o in operation.outputs],
                "preferred": _device_name(usage.preferred_compute_device) if usage else None,
                "supported": sorted(_device_name(d) for d in usage.supported_compute_devices) if usage else [],
                "estimated_cost": cost.weight if cost else None,
            }
            preferred[entry["preferred"]] += 1
            ops.append(entry)
    return {
        "available": True, "compute_units": compute_units, "platform": platform.platform(),
        "non_constant_ops": len(ops), "constants": constants,
        "prefer_neural_engine": preferred.get("NeuralEngine", 0),
        "preferred_counts": dict(preferred),
        "supported_neural_engine": sum("NeuralEngine" in op["supported"] for op in ops),
        "ops": ops,
    }
