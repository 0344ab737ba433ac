#!/bin/bash
set -u
T0=$(date +%s)
export HOME=/tmp/h PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false CUDA_VISIBLE_DEVICES=
mkdir -p "$HOME" /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/pictrieve
echo "== main commit: $(cat .devrun/commit.txt)"; nproc; grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devrun/whl/*.whl || { echo "pip install failed"; exit 3; }
export PYTHONPATH=/tmp/site:/tmp/pkg
python3 -c "import onnxruntime, torch; print('ort', onnxruntime.__version__, 'torch', torch.__version__)"
echo "== setup done after $(( $(date +%s) - T0 )) s"
timeout 110 python3 benchmarks/open_clip_runtimes.py .devrun/photos --batch 32 --rounds 4 --threads 16 --workers 8 --arms torch,onnx-fp32,onnx-fp32-unfused --json 2>&1 | tee "$OUT/ocr16.log"
echo "== 16 threads rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
LEFT=$(( 215 - ($(date +%s) - T0) ))
if [ $LEFT -gt 40 ]; then
  timeout $LEFT taskset -c 0,1 python3 benchmarks/open_clip_runtimes.py .devrun/photos --batch 32 --rounds 3 --threads 2 --workers 2 --arms torch,onnx-fp32 --json 2>&1 | tee "$OUT/ocr2.log"
  echo "== 2 threads rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
fi
