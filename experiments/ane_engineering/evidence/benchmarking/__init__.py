"""Benchmarks: warm-call timings of packages and of the full request path, written as evidence JSON."""
