"""The chat model behind the LLM operator: any OpenAI-compatible endpoint, through langchain-openai.

Configured by OPENAI_BASE_URL, OPENAI_API_KEY and a model name (`--model`). Transient endpoint
errors (rate limits, 5xx, connection failures, timeouts) are retried with exponential backoff a
bounded number of times; whatever still fails becomes an LLMError whose message is one line.

    config = llm_config(model="qwen2.5-coder", base_url=None)   # None when no LLM is configured
    chat = ChatClient(config)
    chat.check()                                                # fails fast on a bad key or URL
    reply = chat.invoke(messages, tools=[...])
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Mapping

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # langchain and openai take about a second to import: only when a model is used
    from langchain_core.messages import AIMessage, BaseMessage

DEFAULT_URL = "https://api.openai.com/v1"


class LLMError(RuntimeError):
    """The endpoint could not give a reply; str(error) is one line for a person."""


class LLMConfigError(LLMError):
    """The LLM settings are incomplete (a model without a key, a key without a model)."""


@dataclass
class LLMConfig:
    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None  # None: the OpenAI API
    temperature: float = 0.7
    timeout_s: float = 180.0  # one request
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
    return LLMConfig(model=model, api_key=key, base_url=base_url, **overrides)


def _retryable(error: Exception) -> bool:
    import openai
    return isinstance(error, (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError))


def _describe(error: Exception, config: LLMConfig) -> str:
    import openai
    """One line saying what went wrong with the endpoint."""
    where = f"the LLM endpoint at {config.url}"
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
    """ChatOpenAI with our own bounded retry loop (the client's built-in retries are off)."""

    def __init__(self, config: LLMConfig, sleep=time.sleep):
        from langchain_openai import ChatOpenAI
        self.config = config
        self.sleep = sleep
        self.rng = random.Random(config.seed)
        self.model = ChatOpenAI(model=config.model, api_key=config.api_key, base_url=config.base_url,
                                temperature=config.temperature, timeout=config.timeout_s, max_retries=0,
                                seed=config.seed)
        self.retried = 0  # retries made so far, for the report

    def _with_retries(self, call, retries: int | None = None):
        import openai
        retries = self.config.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return call()
            except openai.APIError as e:
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

    def invoke(self, messages: list[BaseMessage], tools: list[dict] | None = None) -> AIMessage:
        runnable = self.model.bind_tools(tools) if tools else self.model
        return self._with_retries(lambda: runnable.invoke(messages))

    def check(self) -> None:
        import openai
        """Fails with a clear LLMError when the endpoint is unreachable or refuses the key.

        A server without a /models route (404) passes: the chat route is what matters. One retry only,
        so that a wrong URL is reported within seconds."""
        client = self.model.root_client.with_options(timeout=min(30.0, self.config.timeout_s))
        try:
            self._with_retries(lambda: client.models.list(), retries=1)
        except LLMError as e:
            if not isinstance(e.__cause__, openai.NotFoundError):
                raise
