#!/bin/sh
# The worker function's package (the template's CodeUri, deploy/aws/build/worker/):
# ferryman[aws] and every dependency as Linux x86_64 wheels for Python 3.11, whatever
# machine builds it. Run it before `sam deploy` (no `sam build` is needed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}

rm -rf "$here/build"
"$python" -m pip wheel --no-deps --wheel-dir "$here/build/dist" "$root"
wheel=$(ls "$here"/build/dist/ferryman-*.whl)
"$python" -m pip install --target "$here/build/worker" \
    --platform manylinux2014_x86_64 --implementation cp --python-version 3.11 \
    --only-binary=:all: "${wheel}[aws]"
echo "built $here/build/worker"
