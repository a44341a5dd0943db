"""The research wing: every study of this project, its pre-registration, scripts, records and figures.

research/README.md is the report. Importing this package registers the study-only tasks
(study_tasks.py, into nano_respo.tasks.TASKS) and kernel rows (study_rows.py, into
nano_respo.kernel.METHOD_TABLE) by name; the reference (nano_respo/, toy/, the course, train.py,
eval.py) never imports it (tests/step/test_two_wings.py). Run its scripts from the repository's
root as modules: python -m research.<script>.
"""

from . import study_tasks  # noqa: F401  (registers digit_sum, digit_conflict)
from . import study_rows  # noqa: F401  (registers respo_wtilt, respo_pos_clip_neg, seq_clip_lowpos1)
