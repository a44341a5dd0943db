"""The experiments: one entry script per study, their shared helpers in common.py, results/ their records."""
