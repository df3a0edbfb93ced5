"""Stand-ins for the engines' heavy imports (torch, triton, transformers ...), so their argument parsers can be built
from the unpacked wheels on a machine without a GPU: any third-party module not installed imports as a permissive stub
(attributes are stub classes that may be subclassed, called, compared and used as decorators). Only the parser is
built; nothing of the engines runs."""

import abc, sys, importlib.abc, importlib.machinery, types


_PROTOCOL = {"__set_name__", "__get__", "__set__", "__delete__", "__origin__", "__args__", "__parameters__",
             "__wrapped__", "__signature__", "__func__", "__self__", "__isabstractmethod__", "__text_signature__",
             "__annotations__", "__dataclass_fields__", "__pydantic_core_schema__", "__get_pydantic_core_schema__",
             "__get_pydantic_json_schema__", "__supertype__", "__len__", "__fspath__", "__index__"}


_ABSENT = {"npu", "xpu", "musa", "mlu", "hpu"}


class _Meta(abc.ABCMeta):
    def __getattr__(cls, name):
        if name in _PROTOCOL:
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _stub_class(f"{cls.__name__}()")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    def __float__(cls):
        return 0.0

    def __lt__(cls, other):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __add__(cls, other):
        return cls

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __add__

    def __mro_entries__(cls, bases):
        return (_Base,)


class _Base:
    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        pass


def _stub_class(name):
    return _Meta(name.replace(".", "_"), (_Base,), {})


class _Stub(types.ModuleType):
    __path__ = []
    __version__ = "99.0.0"

    def __getattr__(self, name):
        if (name.startswith("__") and name.endswith("__")) or name in _ABSENT:
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in sys.stdlib_module_names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except Exception:
                pass
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        pass
