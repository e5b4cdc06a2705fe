#!/usr/bin/env bash
# bench/setup-peers.sh: a virtualenv with a current PyTorch from PyPI, the strongest peer for
# bench/train_vs_torch.py (Debian's torch 1.13 is always run as well). Benchmarks only: nothing
# in zerotask or its tests uses it. Usage: bash bench/setup-peers.sh [VENV_DIR] (default
# bench/.venv); then: python3 bench/train_vs_torch.py --peer VENV_DIR/bin/python
set -euo pipefail
venv=${1:-"$(dirname "$0")/.venv"}
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q torch numpy
"$venv/bin/python" -c 'import torch; print("peer ready:", torch.__version__)'
