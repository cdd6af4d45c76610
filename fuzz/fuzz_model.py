"""Fuzz target: the model reader, end to end (read, resolve, dump, summary).

Invariant: for any bytes, `load_model_bytes` either imports (and the dump and
summary render) or raises `ModelImportError`; nothing else escapes, nothing
hangs (libFuzzer -timeout) and memory stays bounded (-rss_limit_mb).
Run with tools/run_fuzz.sh model SECONDS.
"""

from __future__ import annotations

import atheris
from runner import fuzz

with atheris.instrument_imports(include=["importer"]):  # our code, not numpy's
    from importer import Limits, ModelImportError, load_model_bytes
    from importer.dump import render_dump
    from importer.summary import summarize

LIMITS = Limits(max_nesting=64)


def test_one_input(data: bytes) -> None:
    try:
        with load_model_bytes(data, name="fuzz", limits=LIMITS) as model:
            render_dump(model.proto)
            summarize(model)
            for value in model.graph.values.values():
                if value.initializer is not None and hasattr(value.initializer, "to_numpy"):
                    value.initializer.to_numpy()
    except ModelImportError:
        pass


def main() -> None:
    fuzz(test_one_input)


if __name__ == "__main__":
    main()
