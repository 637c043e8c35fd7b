"""Stand-ins for the heavy modules the `sglang` package imports at load
time (torch, triton, PIL, IPython): its frontend language and its server
test kits only send HTTP requests, so a module whose every attribute is a
mock is enough for the imports to succeed. Anything that really computes
with torch fails loudly (a MagicMock is not a tensor) and is reported."""
import importlib.abc
import importlib.machinery
import sys
import types
from unittest import mock

STUBBED = {"torch", "triton", "PIL", "IPython"}


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        v = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, v)
        return v


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Stub(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0+stub"
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
