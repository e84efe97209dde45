"""The judge core both benchmarks share: the side processes' handles, the values sent across to them,
the judge's clocks, output comparison, the sandbox layers, the in-worker integrity checks, the judge's
state (``judging.py``: Judge, Run, Call, the reading arithmetic), the harness and profiling pieces and
the wire formats both judges use. Imports nothing from the rooms above it (``kernelbench``,
``backendbench``, ``workers``, the service); ``tests/test_import_graph.py`` checks it."""
