"""benchmarking/windows.py: the long window is run only on a device backend, and a burst -> sustained step shows
between its blocks."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.evidence.benchmarking.windows import long_window


def test_the_long_window_is_not_run_off_the_device():
    result = long_window(lambda: None, "mil", calls=10)
    assert result["ran"] is False and "not the device" in result["why"]
    assert long_window(lambda: None, "coreml", calls=0)["ran"] is False
    assert long_window(lambda: None, "coreml-cpu", calls=10)["ran"] is False  # not the Neural Engine


def test_a_step_after_some_calls_shows_between_blocks(monkeypatch):
    from experiments.ane_engineering.evidence.benchmarking import timing

    clock = {"now": 0.0, "n": 0}
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["now"])  # a clock the device advances

    def call():  # a device that slows down for good after 30 calls (the public transition came after ~830)
        clock["n"] += 1
        clock["now"] += 0.0005 if clock["n"] <= 30 else 0.003

    result = long_window(call, "coreml", calls=60, block=20)
    assert result["ran"] and [b["first_call"] for b in result["blocks"]] == [0, 20, 40]
    assert result["timing"]["n"] == 60
    assert result["blocks"][0]["p50_ms"] == pytest.approx(0.5) and result["blocks"][2]["p50_ms"] == pytest.approx(3.0)
    assert result["last_over_first_block_p50"] == pytest.approx(6.0)


@pytest.mark.slow
def test_the_benchmark_reports_a_short_window_and_says_why_no_long_one_ran(tiny_packages, tiny):
    from experiments.ane_engineering.evidence.benchmarking.run import benchmark

    directory, _ = tiny_packages.get("body", 96)
    result = benchmark(tiny, directory, "mil", component={"warmup": 0, "calls": 2}, full_path={"warmup": 0, "calls": 1})
    windows = result["windows"]
    assert windows["short"]["calls"] == 2 and windows["short"]["p50_ms"] == result["component"]["timing"]["p50_ms"]
    assert windows["long"]["ran"] is False and "not the device" in windows["long"]["why"]
