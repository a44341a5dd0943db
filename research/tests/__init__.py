"""The research wing's own checks: every study script, rule and record reading (python -m pytest -q research)."""
