"""The mil-ane backend and the commands that take it: the family travels in the backend name, --ane-family is
refused where it would change nothing, execute --mode ane prints the first op where a cliff fired, and the
numerics evidence renders with every figure traced to its file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.run.backends import BackendError, backend_name, choose_backend


def test_the_family_travels_in_the_backend_name():
    assert backend_name("mil-ane", None) == "mil-ane" and backend_name("mil-ane", "a16") == "mil-ane-a16"
    default, a16 = choose_backend("mil-ane"), choose_backend(backend_name("mil-ane", "a16"))
    assert default.name == a16.name == "mil-ane" and default.mode == "ane"
    assert default.ane_family == "pre-a16" and a16.ane_family == "a16"
    assert default.describe()["ane_family"] == "pre-a16"
    with pytest.raises(BackendError, match="applies to --backend mil-ane only"):
        backend_name("mil", "a16")
    with pytest.raises(BackendError, match="family must be one of"):
        choose_backend("mil-ane-a15")
    with pytest.raises(BackendError, match="fixes mode ane"):
        choose_backend("mil-ane", mode="fp16-strict")


def test_commands_refuse_ane_family_without_the_ane_backend(tmp_path, capsys):
    from experiments.ane_engineering import execute, validate

    status = run_main(validate.main, ["--package", str(tmp_path), "--backend", "mil", "--ane-family", "a16",
                                      "--output", str(tmp_path / "v.json")])
    assert status == 2 and "--ane-family applies to --backend mil-ane only" in capsys.readouterr().err
    status = run_main(execute.main, ["--package", str(tmp_path), "--inputs", str(tmp_path / "i.npz"), "--output",
                                     str(tmp_path / "o.npz"), "--ane-family", "a16"])
    assert status == 2 and "--ane-family is not used without --mode ane" in capsys.readouterr().err


@pytest.mark.slow
def test_execute_mode_ane_names_the_first_cliff(tiny_packages, tmp_path, capsys):
    from experiments.ane_engineering import execute
    from experiments.ane_engineering.package.inputs.questions import load_questions
    from experiments.ane_engineering.run.agent import ANEAgent

    directory, _ = tiny_packages.get("body", 96)
    agent = ANEAgent([directory], tiny_packages.checkpoint, "mil")
    encoded = next(e for e in (agent.encode(q) for q in load_questions()) if e.num_tokens <= 96)
    inputs = {k: v.astype(np.float16) for k, v in
              agent.device_inputs(encoded.input_ids, encoded.token_types, encoded.marker_positions, 96).items()}
    np.savez(tmp_path / "ok.npz", **inputs)
    # the same question with a mask bias of -4e4 instead of -1e4: a finite FP16 value, but the score einsum that
    # carries the folded mask (ANE_MATH.md sections 4 and 6) then outputs past the matmul cliff
    assert encoded.num_tokens < 96 and inputs["global_mask"].min() < 0  # padding keys are masked
    loud = dict(inputs, global_mask=(inputs["global_mask"].astype(np.float32) * 4).astype(np.float16))
    np.savez(tmp_path / "loud.npz", **loud)
    for name, fired in (("ok", False), ("loud", True)):
        argv = ["--package", str(directory), "--inputs", str(tmp_path / f"{name}.npz"), "--output",
                str(tmp_path / f"{name}-out.npz"), "--mode", "ane"]
        assert run_main(execute.main, argv) == 0
        line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("ane_cliff: ")][0]
        cliff = json.loads(line[len("ane_cliff: "):])
        assert (cliff is not None) == fired
        if fired:
            assert cliff["type"] == "einsum" and cliff["cliff"] == "matmul_output"
            assert abs(cliff["value"]) > cliff["cliff_value"]


@pytest.mark.slow
def test_numerics_evidence_renders_with_every_figure_traced(tmp_path):
    from experiments.ane_engineering.evidence.ledger import Ledger, check_report
    from experiments.ane_engineering.evidence.sections_numerics import section_numerics
    from experiments.ane_engineering.workflows.benchmarks.ane_numerics import ane_numerics_evidence

    evidence = ane_numerics_evidence("builtin:tiny", [96], ["dense"], questions=2, strict_questions=0)
    run = evidence["runs"][0]
    assert run["headroom"]["measured"] and run["headroom"]["inputs_measured"] == 2
    assert set(run["backends"]) == {"mil", "mil-ane-pre-a16", "mil-ane-a16"}
    assert all(b["passed"] and b["evaluated"] == 2 for b in run["backends"].values())
    root = tmp_path / "repo"
    (root / "evidence").mkdir(parents=True)
    (root / "evidence" / "ane-numerics-builtin-tiny.json").write_text(json.dumps(evidence), encoding="utf-8")
    ledger = Ledger(root)
    text, figures = ledger.finish("\n".join(section_numerics(ledger, root / "evidence")))
    assert "builtin:tiny" in text and run["headroom"]["minimum"]["op"] in text
    assert check_report(text, figures, root) == []
