#!/usr/bin/env bash
# Prints the project venv's Python (.venv/bin/python, made by `scripts/setup.sh venv`) when it
# imports every module named (default: transformers). Otherwise prints the reason on stderr
# and exits 1, so a test can say SKIPPED with it.
# Usage: python=$(scripts/venv_python.sh transformers torch) || { echo "SKIPPED: ..."; exit 77; }
cd "$(dirname "$0")/.."
modules=$(IFS=,; echo "${*:-transformers}")
python=$PWD/.venv/bin/python
if [ ! -x "$python" ]; then
  echo "no project venv at .venv/ (scripts/setup.sh venv installs tools/requirements.txt from PyPI)" >&2
  exit 1
fi
if ! "$python" -c "import $modules" 2>/dev/null; then
  echo "the venv at .venv/ does not import $modules (run scripts/setup.sh venv again)" >&2
  exit 1
fi
echo "$python"
