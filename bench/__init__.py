"""The benchmark harness (see bench/README.md). Never imported by objstore, never run by the
test suite; only its pure helpers have unit tests."""
