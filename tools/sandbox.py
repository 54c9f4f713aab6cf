"""The one way candidate code is run: a subprocess in its own process group, in a scratch directory,
with credentials scrubbed from its environment and a hard timeout that kills the whole group."""
from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass

# Names that look like credentials never reach candidate code.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT", re.I)
SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "GH_", "GITHUB_", "HF_",
                   "HUGGING", "LANGCHAIN_", "LANGSMITH_", "WANDB_", "SSH_", "GPG_", "NPM_", "PYPI_")


@dataclass
class SandboxResult:
    returncode: int | None  # None when killed on timeout
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            return signal.Signals(-self.returncode).name
        return None


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment less anything credential-like, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not SECRET_NAME.search(k) and not k.upper().startswith(SECRET_PREFIXES)}
    env.update(extra or {})
    return env


def run_sandboxed(argv: list[str], *, cwd: str, timeout_s: float, env: dict[str, str]) -> SandboxResult:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return SandboxResult(proc.returncode, out, err, timed_out=False)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return SandboxResult(None, out, err, timed_out=True)
    except BaseException:  # KeyboardInterrupt included: never leave a candidate running
        _kill_group(proc)
        proc.wait()
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
