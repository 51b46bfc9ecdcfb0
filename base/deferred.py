"""Import a few modules of a large package without running the package's ``__init__``.

Python runs every parent package's ``__init__`` before a submodule. kubernetes-asyncio's
imports all its generated API and model classes (about 31 MiB of RSS per process), while
``base.kube`` needs only ``ApiClient``, ``Configuration`` and the config loaders: one listener
runs per scale set, so those megabytes are paid dozens of times per cluster.

:func:`defer_init` puts a stand-in for the package in ``sys.modules``: its submodules import
as usual (it has the package's ``__path__``), and its ``__init__`` runs, into the same module
object, only when someone asks it for a name that is not a submodule (a test that uses
``client.CoreV1Api``, say). The objects are the package's own either way, so code that imports
the package normally later gets the same classes.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.RLock()


class _DeferredPackage(types.ModuleType):
    """A package module whose ``__init__`` has not run yet (see the module docstring)."""

    def __getattr__(self, name: str) -> Any:
        # Only called for names the module does not have yet.
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if importlib.util.find_spec(full) is not None:
            return importlib.import_module(full)
        with _lock:
            if not self.__dict__.get("_deferred_init_ran"):
                self.__dict__["_deferred_init_ran"] = True
                loader = self.__spec__.loader if self.__spec__ is not None else None
                if loader is None:
                    raise AttributeError(name)
                loader.exec_module(self)
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def defer_init(*names: str) -> types.ModuleType:
    """Stand-ins for the packages ``names`` (parents first); returns the last one.

    A package already imported is left as it is.
    """
    module: types.ModuleType | None = None
    with _lock:
        for name in names:
            module = sys.modules.get(name)
            if module is not None:
                continue
            spec = importlib.util.find_spec(name)
            if spec is None or spec.submodule_search_locations is None:
                raise ImportError(f"{name} is not an importable package")
            module = importlib.util.module_from_spec(spec)
            module.__class__ = _DeferredPackage
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
    assert module is not None
    return module
