"""What keeps a run alive: its config and command line, the session (lock, resume, signals, saves),
checkpoints, the metrics log and plots, and the eval.py entry point."""
