"""A scripted OpenAI-compatible server for tests: stdlib http.server on 127.0.0.1, in a thread.

It replays replies written in advance (text, tool calls, HTTP errors) to POST /v1/chat/completions
and lists one model at GET /v1/models, so that langchain-openai's real client, request building and
tool-call parsing run end to end. It measures nothing about any model: every reply is fixed by the test.

    with ScriptedOpenAI([tool_calls(("read_parent", {})), text("done")]) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": server.key}
        ...
        server.requests   # the JSON bodies received, in order
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Reply = dict  # {"status": int, "body": dict, "headers": dict}


def text(content: str, finish_reason: str = "stop", delay_s: float = 0.0, **fields) -> Reply:
    """A text reply; `fields` go into the message as they are (e.g. reasoning_content), `delay_s` is slept
    before the reply (or, streamed, between its chunks)."""
    return {"status": 200, "message": {"role": "assistant", "content": content, **fields},
            "finish_reason": finish_reason, "delay_s": delay_s}


def tool_calls(*calls: tuple[str, dict | str], content: str | None = None) -> Reply:
    """Tool calls; arguments given as a str are sent verbatim (for malformed JSON)."""
    return {"status": 200, "message": {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{i}_{name}", "type": "function",
         "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
        for i, (name, args) in enumerate(calls)]}}


def error(status: int, message: str = "scripted error", headers: dict | None = None) -> Reply:
    return {"status": status, "error": message, "headers": headers or {}}


class ScriptedOpenAI:
    """Replies in order from `script`; after it runs out, from `responder(request, n)` if given, else 500."""

    def __init__(self, script: list[Reply] | None = None,
                 responder: Callable[[dict, int], Reply] | None = None, key: str = "test-key",
                 model: str = "scripted-model"):
        self.script, self.responder, self.key, self.model = list(script or []), responder, key, model
        self.requests: list[dict] = []
        self.dropped = 0  # streamed replies the client stopped reading
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _send_stream(self, msg: dict, finish: str, delay_s: float) -> None:
                """Server-sent events as OpenAI streams them: the text in pieces, tool calls whole, then
                the finish reason, the usage and [DONE]; `delay_s` between pieces."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                content = msg.get("content") or ""
                deltas = [{"role": "assistant", "content": ""}]
                deltas += [{"content": content[i:i + 16]} for i in range(0, len(content), 16)]
                deltas += [{"tool_calls": [dict(c, index=k)]} for k, c in enumerate(msg.get("tool_calls") or [])]
                base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": server.model}
                try:
                    for delta in deltas:
                        self._event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                        time.sleep(delay_s)
                    self._event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                    self._event({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 10,
                                                                  "total_tokens": 20}})
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as a server sees it
                    server.dropped += 1

            def _event(self, data: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
                self.wfile.flush()

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {server.key}":
                    return True
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})
                return False

            def do_GET(self):
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model",
                                                                 "created": 0, "owned_by": "tests"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self._authorized():
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                reply = server.next_reply(body)
                if "error" in reply:
                    self._send(reply["status"], {"error": {"message": reply["error"], "type": "scripted"}},
                               reply.get("headers"))
                    return
                msg = reply["message"]
                finish = reply.get("finish_reason") or ("tool_calls" if msg.get("tool_calls") else "stop")
                if body.get("stream"):
                    self._send_stream(msg, finish, reply.get("delay_s", 0.0))
                    return
                time.sleep(reply.get("delay_s", 0.0))
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", server.model),
                    "choices": [{"index": 0, "message": msg, "logprobs": None,
                                 "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def next_reply(self, body: dict) -> Reply:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
            if self.script:
                return self.script.pop(0)
        if self.responder is not None:
            return self.responder(body, n)
        return error(500, "the test script has no reply left")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def messages_text(request: dict) -> str:
    """All message contents of one request, joined: what the model was shown."""
    return "\n".join(str(m.get("content") or "") for m in request.get("messages", []))
