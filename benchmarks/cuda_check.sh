#!/usr/bin/env bash
# Every CUDA path of attnclust in one short run: the device tests (pytest -m cuda), then
# the device benchmark against the CPU. Exits 0 with one line where torch sees no CUDA
# device. Usage: benchmarks/cuda_check.sh [--quick]   (docs/guide/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "cuda_check: skipped: no CUDA device (torch.cuda.is_available() is False)"
    exit 0
fi
python -c "import torch; print('cuda_check:', torch.cuda.get_device_name(0), '| torch',
torch.__version__, '| CUDA', torch.version.cuda)"
python -m pytest -q -rs -m cuda tests/ -p no:cacheprovider
python -m attnclust bench --only devices --device cuda "$@"
