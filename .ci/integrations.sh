#!/usr/bin/env bash
# CI for the optional TRL / verl integrations, in their own virtual environment so that
# their pins (transformers < 5.11 for verl 0.9.1) never touch the core environment.
# Idempotent: a second run reuses the environment and only re-checks the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
venv=.venv-integrations
[ -x "$venv/bin/python" ] || "${PYTHON:-python}" -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q torch==2.13.0  # first, so nothing below pulls a CUDA build
"$py" -m pip install -q -r nano_respo/integrations/requirements.txt
"$py" -m pip install -q --no-deps verl==0.9.1
"$py" -m pip install -q --no-deps -e .  # nano_respo importable by scripts run from research/bench/ and examples/

set +e
"$py" -m pytest -q --confcutdir tests/integrations tests/integrations
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no integration tests (exit 5): treating as a failure"
  exit 1
fi
exit "$rc"
