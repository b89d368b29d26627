"""Unit tests of the combined-operator profiler."""
