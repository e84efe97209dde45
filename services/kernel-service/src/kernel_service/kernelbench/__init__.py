"""KernelBench's room: its judge (``judge.py``; how it times the two sides, ``speedup.py``), its request
and response (``schemas.py``), the problem sources (``datasets.py``) and its metrics (``metrics.py``).
Imports only the judge core (``judging``)."""
