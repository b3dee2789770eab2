"""Bad dataset files end in a DatasetError naming file and line, never anything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator import DatasetError, Example, load_examples

_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
)
_value = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_row = st.one_of(
    _value,
    st.fixed_dictionaries(
        {"input": _value},
        optional={"id": _value, "expected": _value, "output": _value, "extra": _value},
    ),
    st.dictionaries(st.sampled_from(["q", "label", "id", "output"]), _value, max_size=4),
)
_settings = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _load(path: Path, **kw: Any) -> list[Example] | DatasetError:
    try:
        return list(load_examples(path, **kw))
    except DatasetError as exc:
        return exc


class TestFuzzDatasets:
    @_settings
    @given(rows=st.lists(_row, max_size=6), flat=st.booleans())
    def test_jsonl_rows(self, tmp_path_factory: Any, rows: list[Any], flat: bool) -> None:
        """Any JSON Lines content loads whole or fails with file and line named."""
        path = tmp_path_factory.mktemp("d") / "data.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        kw: dict[str, Any] = {"input_cols": ["q"], "output_cols": ["label"]} if flat else {}
        out = _load(path, **kw)
        if isinstance(out, DatasetError):
            assert out.path is not None and str(path) in out.path
            assert out.line is not None and 1 <= out.line <= len(rows)
        else:
            assert len(out) == len(rows)  # nothing silently dropped

    @_settings
    @given(text=st.text(max_size=60))
    def test_jsonl_bytes(self, tmp_path_factory: Any, text: str) -> None:
        """Arbitrary text as JSON Lines never raises anything but DatasetError."""
        path = tmp_path_factory.mktemp("d") / "data.jsonl"
        path.write_bytes(text.encode())
        out = _load(path)
        if not isinstance(out, DatasetError):
            rows = [line for line in text.encode().split(b"\n") if line.strip()]
            assert len(out) == len(rows)  # every non-blank line is one example

    @_settings
    @given(text=st.text(alphabet=st.sampled_from('ab,"\n\r1 '), max_size=40))
    def test_csv(self, tmp_path_factory: Any, text: str) -> None:
        """Arbitrary CSV text loads or fails with the file named."""
        path = tmp_path_factory.mktemp("d") / "data.csv"
        path.write_text("a,b\n" + text)
        out = _load(path, input_cols=["a"], output_cols=["b"])
        if isinstance(out, DatasetError):
            assert out.path is not None and str(path) in out.path

    @_settings
    @given(data=_value)
    def test_json(self, tmp_path_factory: Any, data: Any) -> None:
        """Any JSON document as a .json dataset loads or fails with the file named."""
        path = tmp_path_factory.mktemp("d") / "data.json"
        path.write_text(json.dumps(data))
        out = _load(path)
        if isinstance(out, DatasetError):
            assert out.path is not None and str(path) in out.path
