#!/bin/bash
# Device run for issue 31 item 5 (helper gpu). Each step is time-boxed so later steps still run and
# every log lands in $OUT as it is written.
set -u
T0=$(date +%s)
export HOME=/tmp/h PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$HOME" /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/pictrieve
echo "== main commit: $(cat .devrun/commit.txt)"
nvidia-smi; nproc; python3 -V; grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devrun/whl/*.whl || { echo "pip install failed"; exit 3; }
NEED=$(python3 - <<'PY'
import importlib.metadata as m
from packaging.version import Version
need = []
if Version(m.version("protobuf")) < Version("6.33.5"): need.append(".devrun/opt/protobuf-*.whl")
if Version(m.version("typing_extensions")) < Version("4.16.0"): need.append(".devrun/opt/typing_extensions-*.whl")
print(" ".join(need))
PY
)
echo "== optional wheels needed: ${NEED:-none}"
[ -n "$NEED" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $NEED
export PYTHONPATH=/tmp/site:/tmp/pkg
python3 -m pip list 2>/dev/null | grep -iE "^(torch|torchvision|timm|numpy|onnx|onnxruntime|protobuf|typing.extensions|huggingface.hub|pillow|grpcio) "
python3 -c "import chromadb, open_clip, torch, pictrieve.vectorstore.gallery as g; print('imports ok', chromadb.__version__, open_clip.__version__, torch.__version__, torch.cuda.get_device_name())" || exit 4
echo "== setup done after $(( $(date +%s) - T0 )) s"
cp BENCHMARKS.md "$OUT/BENCHMARKS.md"
timeout 200 python3 benchmarks/gpu_indexing.py .devrun/photos --limit 200 --repeat 40 --write "$OUT/BENCHMARKS.md" --json 2>&1 | tee "$OUT/gpu_indexing.log"
echo "== gpu_indexing rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
LEFT=$(( 290 - ($(date +%s) - T0) ))
if [ $LEFT -gt 40 ]; then
  timeout $LEFT python3 benchmarks/gpu_indexing.py .devrun/photos --limit 200 --repeat 40 --workers 16 --gallery-size 10000 --queries 50 --write "$OUT/BENCHMARKS.md" --json 2>&1 | tee "$OUT/gpu_indexing_w16.log"
  echo "== gpu_indexing workers 16 rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
else
  echo "== workers-16 run skipped: $LEFT s left"
fi
