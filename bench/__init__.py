"""Benchmarks: each compares against a baseline in the same run and ends with one JSON line."""
