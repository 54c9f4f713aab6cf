"""What every process that runs candidate code gets: an environment with credentials scrubbed, its own
process group so a timeout kills all of it, and one result shape. The processes themselves are started by
tools/evaluate.py (a fork server per worker slot) and forked in tools/forkserver.py."""
from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass

# Names that look like credentials never reach candidate code.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT", re.I)
SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "GH_", "GITHUB_", "HF_",
                   "HUGGING", "LANGCHAIN_", "LANGSMITH_", "WANDB_", "SSH_", "GPG_", "NPM_", "PYPI_")


@dataclass
class SandboxResult:
    returncode: int | None  # None when killed on timeout
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


def kill_group(pid: int) -> None:
    """Kills a process and everything in its process group (children start their own group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def child_of_fork(work) -> None:
    """The life of a server's forked child: a process group of its own (kill_group ends it and what it starts),
    then work(), then an exit that never returns to the server's loop: status 0, or 1 with the traceback on
    stderr."""
    code = 1
    try:
        os.setsid()
        work()
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
