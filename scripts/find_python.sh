#!/usr/bin/env bash
# Prints the first Python that imports every module named (default: torch): Debian's
# /usr/bin/python3 first (python3-torch installs for it, not for a pyenv python3 first on
# PATH), then python3. Exit 1, printing nothing, when none does.
# Usage: python=$(scripts/find_python.sh torch matplotlib) || ...
modules=$(IFS=,; echo "${*:-torch}")
for candidate in /usr/bin/python3 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import $modules" 2>/dev/null; then
    echo "$candidate"
    exit 0
  fi
done
exit 1
