#!/usr/bin/env bash
# Prints the Python 3 that bloatd's lab, demo and tests run with: $PYTHON if
# set, else the first python3 on PATH that has the Debian modules they use
# (python3-matplotlib for the lab's plots, python3-seccomp for the unit's
# system-call filter in the tests, python3-jsonschema for the API's schema
# in the tests; scripts/deps.sh installs them). A
# python3 without them (a pyenv or venv one earlier on PATH) is passed over.
set -euo pipefail
if [[ -n ${PYTHON:-} ]]; then
	echo "$PYTHON"
	exit 0
fi
while read -r p; do
	if "$p" -c 'import matplotlib, seccomp, jsonschema' 2>/dev/null; then
		echo "$p"
		exit 0
	fi
done < <(type -ap python3)
echo "scripts/python.sh: no python3 on PATH has matplotlib, seccomp and jsonschema: run \`sudo make deps\`" >&2
exit 1
