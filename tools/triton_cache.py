"""Triton's on-disk cache in a worker, closed as a channel between candidates. Each job compiles its kernels
into a directory of its own (TRITON_CACHE_DIR, set per job by tools/forkserver.py inside the job's scratch
directory, deleted with it), so nothing one candidate compiled is ever loaded for another. Only the Python
extension modules Triton builds from its own C sources (the driver's utilities, keyed by a hash of that source)
are kept across jobs, in KERNELWRIGHT_TRITON_SHARED: no candidate's code goes into them, and once built they
are only read. The worker's environment names this class in TRITON_CACHE_MANAGER (tools/evaluate.py)."""
from __future__ import annotations

import os
import sysconfig
import uuid

from triton.runtime.cache import FileCacheManager

DRIVER_MODULE_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")  # e.g. .cpython-311-x86_64-linux-gnu.so


class JobCache(FileCacheManager):
    def _shared(self, filename: str) -> str | None:
        """Where a driver module lives across jobs, or None for anything a job compiles."""
        root = os.environ.get("KERNELWRIGHT_TRITON_SHARED")
        if not root or not filename.endswith(DRIVER_MODULE_SUFFIX):
            return None
        directory = os.path.join(root, self.key)
        os.makedirs(directory, exist_ok=True)
        return os.path.join(directory, filename)

    def _make_path(self, filename: str) -> str:
        return self._shared(filename) or super()._make_path(filename)

    def put(self, data, filename, binary=True) -> str:
        path = self._shared(filename)
        if path is None:
            return super().put(data, filename, binary)
        temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}"
        with open(temporary, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(temporary, path)  # atomic: a reader sees the whole module or none
        return path
