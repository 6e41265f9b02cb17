"""Benchmarks that print a report (``make bench``); they measure, they are not timed tests."""
