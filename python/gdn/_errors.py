"""The exceptions gdn raises: one class per status of the C API, all under gdn.Error.

Each class also derives from the built-in exception a Python caller would expect for that kind
of mistake (ValueError for shapes, TypeError for element types, MemoryError, RuntimeError), so
code that catches those keeps working. The message is the library's own: it names the tensor,
the dimension and the values at fault.
"""


class Error(Exception):
    """Base class of every error gdn raises. ``status`` is the C API's gdn_status value."""

    status = None


class InvalidArgumentError(Error, ValueError):
    status = 1


class ShapeError(Error, ValueError):
    status = 2


class LayoutError(Error, ValueError):
    status = 3


class ElementTypeError(Error, TypeError):
    status = 4


class AliasError(Error, ValueError):
    status = 5


class UnsupportedError(Error, NotImplementedError):
    status = 6


class OutOfMemoryError(Error, MemoryError):
    status = 7


class BackendError(Error, RuntimeError):
    status = 8


class UnknownBackendError(Error, ValueError):
    status = 9


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, ShapeError, LayoutError, ElementTypeError, AliasError, UnsupportedError,
    OutOfMemoryError, BackendError, UnknownBackendError)}


def error_class(status):
    """The class for a gdn_status value (called by the extension when a call fails)."""
    return _BY_STATUS.get(int(status), Error)
