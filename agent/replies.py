"""What real model servers send back, made usable: tool calls written as text, reasoning kept out of the
answer, a context length read from a server's answer, and a conversation cut to fit a context.

Models served without a tool-calling template (many small GGUF models under llama.cpp) write a tool call
into the reply's text, as a JSON object, often inside ```json fences or <tool_call> tags. Reasoning models
send their thinking in `reasoning_content` (ignored here) or inline in <think> tags (stripped here).

    calls = text_tool_calls('{"name": "write_kernel", "arguments": {"source": "..."}}', {"write_kernel"})
    answer = strip_reasoning("<think>first...</think>The kernel is ...")
    context_length_from("Requested tokens (5120) exceed context window of 4096")   # 4096
"""
from __future__ import annotations

import json
import re
import uuid

CHARS_PER_TOKEN = 3.0  # a prompt's characters per token until a server's error tells (English ~4, code 2-4)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", flags=re.S)
_CONTEXT = (re.compile(r"context (?:window|length|size) (?:of|is) (\d+)", re.I),
            re.compile(r"maximum context length is (\d+)", re.I),
            re.compile(r"\bn_ctx\D{0,4}(\d+)", re.I))
_PROMPT_TOKENS = (re.compile(r"(\d+) in the messages", re.I), re.compile(r"Requested tokens \((\d+)\)", re.I))
_ARGS_KEYS = ("arguments", "parameters", "args", "input")


def strip_reasoning(text: str | None) -> str:
    """The reply's text without inline reasoning (<think>...</think>, or an unclosed <think> to the end)."""
    return _THINK.sub("", text or "").strip()


def text_tool_calls(text: str | None, names: set[str]) -> list[dict]:
    """Tool calls written into a reply's text: every JSON object naming one of `names`, with its arguments
    under "arguments" (or "parameters", "args", "input") as an object or a JSON string. In order; each call
    gets an id. Objects that name no known tool, or whose arguments are not an object, are not calls."""
    calls, decoder, text = [], json.JSONDecoder(), strip_reasoning(text)
    i = text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        call = _as_call(value, names)
        if call is not None:
            calls.append(call)
        i = text.find("{", end if call is not None else i + 1)
    return calls


def _as_call(value, names: set[str]) -> dict | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):  # {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name") or value.get("tool")
    if name not in names:
        return None
    args = next((value[k] for k in _ARGS_KEYS if k in value), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": name, "args": args, "id": f"text_call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}


def context_length_from(message: str) -> int | None:
    """The context length (tokens) that a server's error message or model listing states, if it does."""
    return _first_number(_CONTEXT, message)


def prompt_tokens_from(message: str) -> int | None:
    """The prompt's length in tokens, where a server's context-length error states it."""
    return _first_number(_PROMPT_TOKENS, message)


def _first_number(patterns: tuple, message: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(message or "")
        if found:
            return int(found.group(1))
    return None


def finish_reason(reply) -> str:
    """Why the server ended a reply ("stop", "length", "tool_calls", ...), or ''."""
    return str((getattr(reply, "response_metadata", None) or {}).get("finish_reason") or "")


def messages_chars(messages: list) -> int:
    return sum(len(_text(m)) for m in messages)


def context_length_of_model(entry: dict) -> int | None:
    """The context length in a /v1/models entry, under the names servers use (vLLM: max_model_len;
    llama.cpp: meta.n_ctx or meta.n_ctx_train; others: context_length)."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), entry.get("context_length"), entry.get("n_ctx"),
                  meta.get("n_ctx"), meta.get("n_ctx_train")):
        if isinstance(value, int) and value > 0:
            return value
    return None


def fit_messages(messages: list, budget_chars: int) -> list:
    """The conversation cut to about `budget_chars` characters of text: the longest texts lose their middle
    first (with a note saying how much went), the last message is cut only when nothing else is left."""
    sizes = [len(_text(m)) for m in messages]
    excess = sum(sizes) - int(budget_chars)
    if excess <= 0:
        return messages
    out = list(messages)
    order = sorted(range(len(out) - 1), key=lambda j: -sizes[j]) + [len(out) - 1]
    for j in order:
        text = _text(out[j])
        if excess <= 0 or len(text) < 400 or not isinstance(out[j].content, str):
            continue
        cut = min(excess + 80, len(text) - 200)
        head = (len(text) - cut) // 2
        out[j] = out[j].model_copy(update={"content": text[:head] + f"\n[... {cut} characters cut to fit the "
                                           f"model's context ...]\n" + text[head + cut:]})
        excess -= cut - 80
    return out


def _text(message) -> str:
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else json.dumps(content)
