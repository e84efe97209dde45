"""Small runnable benchmarks that show the framework end to end (and that the tests drive)."""
