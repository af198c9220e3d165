"""ANEAgent refusals under generated bad inputs: each is refused with a clear RequestError, none crashes, none is
truncated. Generated inputs never reach the device: the refusal happens before the backend call."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.ane_engineering.core.buckets import MARKER_SLOTS, MASK_BIAS
from experiments.ane_engineering.package.inputs.questions import Question, QuestionError
from experiments.ane_engineering.run.agent import ANEAgent, RequestError, check_device_inputs

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python

LENGTH = 96
SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class CountingBackend:
    """Wraps the agent's real backend and counts device calls: a refused request must never make one."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def predict(self, inputs):
        self.calls += 1
        return self.inner.predict(inputs)

    def describe(self):
        return self.inner.describe()


@pytest.fixture(scope="module")
def agent(tiny_packages, tiny):
    agent = ANEAgent([tiny_packages.get("body", LENGTH)[0]], tiny, "mil")
    agent.backends[LENGTH] = CountingBackend(agent.backends[LENGTH])
    return agent


def _good_request(agent, n=20, options=3):
    vocab = agent.checkpoint.config.encoder.vocab_size
    ids = [1] + [5 + (i % (vocab - 5)) for i in range(n - 2)] + [2]
    types = [0] * n
    markers = list(range(3, 3 + 2 * options, 2))
    for m in markers:
        types[m] = 2
    return ids, types, markers


def _refused(agent, ids, types, markers, length=LENGTH):
    before = agent.backends[LENGTH].calls
    with pytest.raises(RequestError) as error:
        inputs = agent.device_inputs(ids, types, markers, length)
        agent.run_device(inputs, length, len(ids), len(markers))
    assert agent.backends[LENGTH].calls == before  # refused before any device call
    assert str(error.value)  # a message, not a bare exception
    return str(error.value)


def test_a_good_request_runs(agent):
    ids, types, markers = _good_request(agent)
    before = agent.backends[LENGTH].calls
    logits = agent.run_device(agent.device_inputs(ids, types, markers, LENGTH), LENGTH, len(ids), len(markers))
    assert agent.backends[LENGTH].calls == before + 1
    assert np.isfinite(logits[:3]).all() and (logits[3:] == -1e4).all()


@SETTINGS
@given(data=st.data())
def test_token_ids_out_of_range_are_refused(agent, data):
    ids, types, markers = _good_request(agent)
    vocab = agent.checkpoint.config.encoder.vocab_size
    bad = data.draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=vocab, max_value=2**40)))
    position = data.draw(st.integers(0, len(ids) - 1))
    ids[position] = bad
    assert "vocabulary" in _refused(agent, ids, types, markers)


@SETTINGS
@given(data=st.data())
def test_marker_positions_out_of_range_or_repeated_are_refused(agent, data):
    ids, types, markers = _good_request(agent)
    n = len(ids)
    markers = data.draw(st.lists(st.integers(-5, 3 * LENGTH), min_size=1, max_size=MARKER_SLOTS).filter(
        lambda ms: any(not 0 <= m < n for m in ms) or len(set(ms)) != len(ms)))
    assert "marker positions" in _refused(agent, ids, types, markers)


@SETTINGS
@given(options=st.integers(MARKER_SLOTS + 1, 200))
def test_more_options_than_marker_slots_are_refused(agent, options):
    ids = [1] + [10] * (LENGTH - 1)
    assert "marker slots" in _refused(agent, ids, [0] * len(ids), list(range(options)))


@SETTINGS
@given(n=st.integers(LENGTH + 1, 5000))
def test_inputs_longer_than_the_largest_bucket_are_refused_not_truncated(agent, n):
    ids = [1] + [10] * (n - 1)
    with pytest.raises(RequestError, match="never truncated"):
        agent.bucket_for(len(ids))
    assert "never truncated" in _refused(agent, ids, [0] * n, [1, 2])


@SETTINGS
@given(data=st.data())
def test_invalid_mask_values_are_refused(agent, data):
    ids, types, markers = _good_request(agent)
    inputs = agent.device_inputs(ids, types, markers, LENGTH)
    name = data.draw(st.sampled_from(["global_mask", "local_mask"]))
    # width=32: the masks are float32 arrays, so every drawn value is stored exactly as drawn.
    value = data.draw(st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True).filter(
        lambda v: v not in (0.0, MASK_BIAS)), st.just(float("-inf")), st.just(float("nan"))))
    k, q = data.draw(st.integers(0, LENGTH - 1)), data.draw(st.integers(0, LENGTH - 1))
    inputs[name][0, k, 0, q] = value
    with pytest.raises(RequestError, match="NaN or Inf|may hold only"):
        check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))


@SETTINGS
@given(data=st.data())
def test_a_query_with_no_valid_key_is_refused(agent, data):
    ids, types, markers = _good_request(agent)
    inputs = agent.device_inputs(ids, types, markers, LENGTH)
    name = data.draw(st.sampled_from(["global_mask", "local_mask"]))
    query = data.draw(st.integers(0, LENGTH - 1))
    inputs[name][0, :, 0, query] = MASK_BIAS
    with pytest.raises(RequestError, match="no valid key"):
        check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))


@SETTINGS
@given(data=st.data())
def test_a_global_mask_with_differing_query_columns_is_refused(agent, data):
    """The full-attention layers read the key bias from column 0 of global_mask (ANE_MATH.md section 4): a mask
    that hides a valid key from one other query only would be misread, so it is refused."""
    ids, types, markers = _good_request(agent)
    inputs = agent.device_inputs(ids, types, markers, LENGTH)
    check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))  # the host's own: accepted
    query = data.draw(st.integers(1, LENGTH - 1))
    key = data.draw(st.sampled_from([k for k in range(len(ids))]))
    inputs["global_mask"][0, key, 0, query] = MASK_BIAS
    if (inputs["global_mask"][0, :, 0, query] == 0.0).any():
        with pytest.raises(RequestError, match="query columns differ"):
            check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))
    else:  # the one valid key hidden: the column has no valid key, refused for that first
        with pytest.raises(RequestError, match="no valid key"):
            check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))


@SETTINGS
@given(data=st.data())
def test_wrong_shapes_and_broken_selectors_are_refused(agent, data):
    ids, types, markers = _good_request(agent)
    inputs = agent.device_inputs(ids, types, markers, LENGTH)
    case = data.draw(st.sampled_from(["shape", "selector-two-hot", "selector-padding", "missing"]))
    if case == "shape":
        name = data.draw(st.sampled_from(sorted(inputs)))
        inputs[name] = inputs[name][..., :-1]
    elif case == "selector-two-hot":
        slot = data.draw(st.integers(0, len(markers) - 1))
        inputs["marker_selector"][0, data.draw(st.integers(0, len(ids) - 1)), 0, slot] += 1
    elif case == "selector-padding":
        inputs["marker_selector"][0, data.draw(st.integers(len(ids), LENGTH - 1)), 0, len(markers)] = 1
    else:
        del inputs[data.draw(st.sampled_from(sorted(inputs)))]
    with pytest.raises(RequestError):
        check_device_inputs(inputs, agent.expected_shapes(LENGTH), len(ids), len(markers))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=40),
       options=st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=40))
def test_arbitrary_questions_are_answered_or_refused_cleanly(agent, text, options):
    """Any text: either a decision with finite outputs, or a RequestError -- never another exception."""
    try:
        question = Question(id="q", kind="choice", text=text, options=tuple(options))
    except QuestionError:
        return  # malformed question objects are refused at construction (empty text, blank options)
    try:
        decision = agent.decide(question)
    except RequestError as error:
        assert str(error)
        return
    assert len(decision.calibrated) == len(options) and np.isfinite(decision.calibrated).all()
