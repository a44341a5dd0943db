"""Benchmarks of the reference: each prints measured ratios and writes a record under results/ (README.md)."""
