"""TensorFlow without its C++ start-up banner on every CLI.

While its shared libraries load, TensorFlow writes lines such as "All log
messages before absl::InitializeLog() is called are written to STDERR" and
"oneDNN custom operations are on" straight to the process's stderr (file
descriptor 2), before absl logging starts, so TF_CPP_MIN_LOG_LEVEL cannot hide
them. `setup_cli()` (run when a CLI of the package starts, before anything
imports TensorFlow) wraps TensorFlow's own import: file descriptor 2 goes to a
temporary file while the import runs, and everything but those known lines is
written back. With TF_CPP_MIN_LOG_LEVEL 0 or 1 nothing is filtered.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

BANNER = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|cpu_feature_guard\.cc"
    r"|^To enable the following instructions: "
)


@contextlib.contextmanager
def banner_filtered():
    """Hold fd 2 while the block runs; then write back every line but the banner's."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not BANNER.search(line)))
            sys.stderr.flush()


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with banner_filtered():
            self.loader.exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") in ("0", "1"):
        return
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def setup_cli() -> None:
    """For a CLI process: TensorFlow's C++ lines at warnings and up unless
    TF_CPP_MIN_LOG_LEVEL says otherwise (worker processes inherit it), and its banner
    filtered out of stderr."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    install()
