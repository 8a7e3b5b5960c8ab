"""Benchmarks: run as python -m bench.<name>; not collected by pytest."""
