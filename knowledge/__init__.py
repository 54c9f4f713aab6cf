"""The knowledge store: hardware and optimization documents and verified kernels (see store.py)."""
