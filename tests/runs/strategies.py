"""Hypothesis strategies for run snapshots: arbitrary JSON plans, scalar outputs, valid ids."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from devcell.runs import CompletedStep, RunSnapshot, utc_timestamp

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
plans = st.one_of(st.lists(json_values, max_size=5),
                  st.dictionaries(st.text(max_size=8), json_values, max_size=5))
run_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True)
step_ids = st.text(min_size=1, max_size=16)
completed_steps = st.lists(
    st.builds(CompletedStep, step_id=step_ids,
              outputs=st.dictionaries(st.text(max_size=10), scalars, max_size=5)),
    max_size=5, unique_by=lambda step: step.step_id,
).map(tuple)
resume_schemas = st.one_of(
    st.none(),
    st.just({"type": "object", "required": ["approve"],
             "properties": {"approve": {"const": True}}}),
    st.builds(lambda key, kind: {"type": "object", "properties": {key: {"type": kind}}},
              st.text(max_size=8), st.sampled_from(["string", "integer", "boolean", "null"])),
)
timestamps = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31),
                          timezones=st.just(UTC)).map(utc_timestamp)


@st.composite
def snapshots(draw: st.DrawFn, run_id: st.SearchStrategy[str] = run_ids) -> RunSnapshot:
    return RunSnapshot(
        run_id=draw(run_id),
        plan_id=draw(st.text(min_size=1, max_size=16)),
        plan=draw(plans),
        completed_steps=draw(completed_steps),
        suspended_step_id=draw(step_ids),
        resume_schema=draw(resume_schemas),
        suspended_at=draw(timestamps),
    )
