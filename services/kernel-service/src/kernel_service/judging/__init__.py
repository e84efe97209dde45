"""The judge core both benchmarks share: the side processes' handles, the values sent across to them,
the judge's clocks, output comparison, the sandbox layers, the in-worker integrity checks, the judge's
state (``judging.py``: Judge, Run), a call's outputs (``outputs.py``: Call), the reading arithmetic and
what it is measured with (``readings.py``, ``calibration.py``), the sides' places under MPS
(``placement.py``), the harness and profiling pieces and the wire formats both judges use. Imports
nothing from the rooms above it (``kernelbench``, ``backendbench``, ``workers``, the service);
``tests/test_import_graph.py`` checks it."""
