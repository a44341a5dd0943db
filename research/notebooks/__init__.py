"""The record readings: notebooks that read the studies' committed records (python -m research.notebooks.build)."""
