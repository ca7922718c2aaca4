"""Benchmark harness: data sets, baselines, a resumable runner and the report."""
