"""The chat model behind the LLM operator: any OpenAI-compatible endpoint, through langchain-openai.

Configured by OPENAI_BASE_URL, OPENAI_API_KEY and a model name (`--model`). Transient endpoint
errors (rate limits, 5xx, connection failures, timeouts) are retried with exponential backoff a
bounded number of times; whatever still fails becomes an LLMError whose message is one line.

    config = llm_config(model="qwen2.5-coder", base_url=None)   # None when no LLM is configured
    chat = ChatClient(config)
    chat.check()                                                # fails fast on a bad key or URL
    reply = chat.invoke(messages, tools=[...], deadline=time.monotonic() + 60)

A request never outlives its deadline: its timeout is the time left, its reply is capped at the tokens the
server can generate in that time (measured from earlier replies), a streamed reply is dropped mid-way at the
deadline (LLMTimeUp). Real servers differ from the spec in ways the client absorbs: tool calls written as
text are parsed (agent/replies.py), a context-length error teaches the client the model's context and the
request is cut to fit and sent again once.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Mapping

from typing import TYPE_CHECKING

from agent.replies import (CHARS_PER_TOKEN, context_length_from, context_length_of_model, fit_messages,
                           messages_chars, prompt_tokens_from, text_tool_calls)

if TYPE_CHECKING:  # langchain and openai take about a second to import: only when a model is used
    from langchain_core.messages import AIMessage, BaseMessage

DEFAULT_URL = "https://api.openai.com/v1"


class LLMError(RuntimeError):
    """The endpoint could not give a reply; str(error) is one line for a person."""


class LLMConfigError(LLMError):
    """The LLM settings are incomplete (a model without a key, a key without a model)."""


class LLMTimeUp(LLMError):
    """The deadline came before or during a request; the search's other operators go on. `partial` is what
    a streamed reply had said by then."""

    def __init__(self, message: str, partial: str = ""):
        super().__init__(message)
        self.partial = partial


MIN_REQUEST_S = 5.0  # a request with less time than this left is not sent
MIN_TOKENS = 128  # the smallest reply cap worth asking for


@dataclass
class LLMConfig:
    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None  # None: the OpenAI API
    temperature: float = 0.7
    timeout_s: float = 180.0  # one request, at most; a deadline shortens it
    max_tokens: int = 4096  # one reply, at most; a deadline lowers it to what the server can write in time
    stream: bool = True  # streamed, a request can be dropped at its deadline and the server stops writing
    context_tokens: int | None = None  # the model's context length; learned from the server when it says
    retries: int = 4  # extra attempts after a transient failure
    backoff_s: float = 2.0  # first wait; doubles each retry, capped at backoff_cap_s
    backoff_cap_s: float = 60.0
    seed: int | None = None

    @property
    def url(self) -> str:
        return self.base_url or DEFAULT_URL


def llm_config(model: str | None, base_url: str | None = None,
               env: Mapping[str, str] = os.environ, **overrides) -> LLMConfig | None:
    """The LLM settings from flags and environment, or None when no LLM is configured at all."""
    base_url = base_url or env.get("OPENAI_BASE_URL") or None
    key = env.get("OPENAI_API_KEY") or None
    if not (model or base_url or key):
        return None
    if not model:
        raise LLMConfigError("An LLM endpoint is configured (OPENAI_BASE_URL or OPENAI_API_KEY) but no model "
                             "was named: pass --model NAME.")
    if not key:
        raise LLMConfigError(f"OPENAI_API_KEY is not set for model {model!r}; set it (local servers such as "
                             f"vLLM or Ollama accept any value).")
    if env.get("KERNELWRIGHT_LLM_STREAM"):
        overrides.setdefault("stream", env["KERNELWRIGHT_LLM_STREAM"] not in ("0", "false", "no"))
    if env.get("KERNELWRIGHT_LLM_MAX_TOKENS"):
        try:
            overrides.setdefault("max_tokens", int(env["KERNELWRIGHT_LLM_MAX_TOKENS"]))
        except ValueError:
            raise LLMConfigError(f"KERNELWRIGHT_LLM_MAX_TOKENS must be a whole number of tokens, not "
                                 f"{env['KERNELWRIGHT_LLM_MAX_TOKENS']!r}.") from None
    return LLMConfig(model=model, api_key=key, base_url=base_url, **overrides)


def _retryable(error: Exception) -> bool:
    import openai
    return isinstance(error, (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError))


def _describe(error: Exception, config: LLMConfig) -> str:
    """One line saying what went wrong with the endpoint."""
    import openai
    where = f"the LLM endpoint at {config.url}"
    if isinstance(error, openai.APITimeoutError):
        return f"{where} did not answer in time (the request's timeout ran out)"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return f"cannot reach {where} ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})"
    if isinstance(error, openai.AuthenticationError):
        return f"{where} rejected the API key (401)"
    if isinstance(error, openai.PermissionDeniedError):
        return f"{where} refused access (403)"
    if isinstance(error, openai.NotFoundError):
        return f"{where} has no model {config.model!r} or no chat-completions route (404)"
    if isinstance(error, openai.RateLimitError):
        return f"{where} kept rate-limiting the requests (429) after {config.retries} retries"
    if isinstance(error, openai.APIStatusError):
        body = str(getattr(error, "message", error)).splitlines()[0][:200]
        return f"{where} answered {error.status_code}: {body}"
    return f"{where} failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"


class ChatClient:
    """ChatOpenAI with our own bounded retry loop (the client's built-in retries are off), deadlines, and
    what real servers need (see the module's docstring)."""

    def __init__(self, config: LLMConfig, sleep=time.sleep):
        from langchain_openai import ChatOpenAI
        self.config = config
        self.sleep = sleep
        self.rng = random.Random(config.seed)
        self.model = ChatOpenAI(model=config.model, api_key=config.api_key, base_url=config.base_url,
                                temperature=config.temperature, timeout=config.timeout_s, max_retries=0,
                                seed=config.seed, stream_usage=True)
        self.retried = 0  # retries made so far, for the report
        self.context_tokens = config.context_tokens
        self.tokens_per_s: float | None = None  # the server's generation speed, from earlier replies
        self.chars_per_token = CHARS_PER_TOKEN  # lowered when a context-length error shows it is fewer
        self.sent_chars = 0  # characters of the last prompt sent

    def _with_retries(self, call, retries: int | None = None, deadline: float | None = None):
        import openai
        retries = self.config.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return call()
            except openai.APIError as e:
                if isinstance(e, openai.APITimeoutError) and deadline is not None \
                        and deadline - time.monotonic() < MIN_REQUEST_S:
                    raise LLMTimeUp(f"the deadline came during a request to {self.config.url}") from e
                if not _retryable(e) or attempt == retries:
                    raise LLMError(_describe(e, self.config)) from e
                self.retried += 1
                self.sleep(self._wait(e, attempt))
        raise AssertionError("unreachable")

    def _wait(self, error: Exception, attempt: int) -> float:
        cap = self.config.backoff_cap_s
        response = getattr(error, "response", None)
        after = response.headers.get("retry-after") if response is not None else None
        if after:
            try:
                return min(float(after), cap)
            except ValueError:
                pass
        wait = self.config.backoff_s * 2 ** attempt
        return min(wait * (0.75 + 0.5 * self.rng.random()), cap)

    def invoke(self, messages: list[BaseMessage], tools: list[dict] | None = None,
               deadline: float | None = None) -> AIMessage:
        """One reply, within the deadline (time.monotonic() seconds) if one is given. Tool calls the model
        wrote as text become the reply's tool calls when it made none the structured way."""
        runnable = self.model.bind_tools(tools) if tools else self.model
        start = time.monotonic()
        for refit in range(3):
            try:
                reply = self._with_retries(lambda: self._request(runnable, messages, deadline), deadline=deadline)
                break
            except LLMError as e:
                if refit == 2 or not self._learn_context(str(e.__cause__ or e)):
                    raise
        self._learn_speed(reply, time.monotonic() - start)
        if tools and not reply.tool_calls:
            names = {t["function"]["name"] for t in tools}
            found = text_tool_calls(reply.text, names)
            if found:
                reply = reply.model_copy(update={"tool_calls": found, "invalid_tool_calls": []})
        return reply

    def _request(self, runnable, messages: list, deadline: float | None) -> AIMessage:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < MIN_REQUEST_S:
            raise LLMTimeUp("the deadline leaves no time for another model request")
        tokens = self.reply_tokens(left)
        options = {"timeout": self.config.timeout_s if left is None else min(self.config.timeout_s, left),
                   "max_tokens": tokens}
        if self.config.base_url:  # llama.cpp and Ollama read max_tokens; ChatOpenAI sends max_completion_tokens
            options["extra_body"] = {"max_tokens": tokens}
        from langchain_core.messages import convert_to_messages
        messages = convert_to_messages(messages)
        if self.context_tokens:
            room = self.context_tokens - tokens - 256  # 256: the chat template's own tokens
            messages = fit_messages(messages, max(room, 256) * self.chars_per_token)
        self.sent_chars = messages_chars(messages)
        if not self.config.stream:
            return runnable.invoke(messages, **options)
        try:
            return self._streamed(runnable.stream(messages, **options), deadline)
        except EmptyStream:  # llama.cpp breaks off the stream of an over-long prompt; unstreamed, it says why
            import openai
            try:
                return runnable.invoke(messages, **options)
            except openai.APIConnectionError:  # the pool handed back the broken stream's connection: once more
                return runnable.invoke(messages, **options)

    def _streamed(self, chunks, deadline: float | None) -> AIMessage:
        """The whole reply of a stream, or LLMTimeUp as soon as a chunk arrives after the deadline: the
        connection is closed, which is what makes a server (llama.cpp's among them) stop generating. A reply
        cut this way still teaches the client the server's speed."""
        from langchain_core.messages import message_chunk_to_message
        total, first = None, None
        try:
            for chunk in _or_empty(chunks):
                total = chunk if total is None else total + chunk
                first = first or time.monotonic()
                if deadline is not None and time.monotonic() > deadline:
                    self._learn_speed(total, time.monotonic() - first)
                    raise LLMTimeUp("the deadline came while the reply was streaming; the request was dropped",
                                    partial=total.text or "")
        finally:
            chunks.close()
        if total is None:
            raise EmptyStream()
        return strict_tool_calls(message_chunk_to_message(total), total.tool_call_chunks)

    def _learn_context(self, error: str) -> bool:
        """What a context-length error says: the context's length and how many tokens the prompt sent took
        (so, how many characters a token is for this model and prompt). False when it says neither."""
        length, used = context_length_from(error), prompt_tokens_from(error)
        if length is None:
            return False
        self.context_tokens = length
        if used and self.sent_chars:
            self.chars_per_token = min(self.chars_per_token, 0.9 * self.sent_chars / used)
        return True

    def reply_tokens(self, left: float | None) -> int:
        """The cap on the next reply: the configured one, lowered to what the server writes in the time left
        (at its measured speed), and to half the context when the context is known."""
        tokens = self.config.max_tokens
        if left is not None and self.tokens_per_s:
            tokens = min(tokens, int(0.9 * left * self.tokens_per_s))
        if self.context_tokens:
            tokens = min(tokens, self.context_tokens // 2)
        return max(tokens, MIN_TOKENS)

    def _learn_speed(self, reply, seconds: float) -> None:
        usage = getattr(reply, "usage_metadata", None) or {}
        written = usage.get("output_tokens") or len(reply.text or "") // 4  # about 4 characters a token
        if written >= 16 and seconds > 0:
            self.tokens_per_s = written / seconds

    def check(self) -> None:
        import openai
        """Fails with a clear LLMError when the endpoint is unreachable or refuses the key.

        A server without a /models route (404) passes: the chat route is what matters. One retry only,
        so that a wrong URL is reported within seconds."""
        client = self.model.root_client.with_options(timeout=min(30.0, self.config.timeout_s))
        try:
            listed = self._with_retries(lambda: client.models.list(), retries=1)
        except LLMError as e:
            if not isinstance(e.__cause__, openai.NotFoundError):
                raise
            return
        entries = [m.to_dict() for m in listed.data]
        mine = [m for m in entries if m.get("id") == self.config.model] or (entries if len(entries) == 1 else [])
        if mine and not self.context_tokens:
            self.context_tokens = context_length_of_model(mine[0])


class EmptyStream(Exception):
    """A streamed request that ended without a single chunk."""


def _or_empty(chunks):
    """The stream's chunks; EmptyStream where langchain finds none (it raises a bare ValueError then)."""
    try:
        yield from chunks
    except ValueError as e:
        if "No generation chunks" in str(e):
            raise EmptyStream() from e
        raise


def strict_tool_calls(reply: AIMessage, chunks: list[dict]) -> AIMessage:
    """The streamed reply with its tool calls parsed as a whole reply's would be: arguments that are not a
    complete JSON object are an invalid call. (Streaming parsers complete partial JSON, so a reply cut in
    the middle of a kernel would otherwise pass as a call with half a kernel.)"""
    calls, invalid = [], []
    for c in chunks:
        try:
            args = json.loads(c.get("args") or "{}")
        except ValueError as e:
            args, error = None, f"not JSON: {e}"
        else:
            error = None if isinstance(args, dict) else "not a JSON object"
        if error is None:
            calls.append({"name": c.get("name"), "args": args, "id": c.get("id"), "type": "tool_call"})
        else:
            invalid.append({"name": c.get("name"), "args": c.get("args"), "id": c.get("id"), "error": error,
                            "type": "invalid_tool_call"})
    return reply.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})
