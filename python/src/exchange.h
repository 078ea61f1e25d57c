// The DLPack C exchange API (`__dlpack_c_exchange_api__`, DLPack 1.2+): a framework's tensor seen
// as a DLTensor through one C call, without the Python-level `__dlpack__` round trip and its
// capsule (about 2 us a tensor for PyTorch's: a tenth of the binding's cost on a decoding step).
#pragma once

#include <Python.h>
#include <nanobind/ndarray.h>

namespace gdn_python {

// Fills `out` with a borrowed view of `obj` (valid while `obj` lives and is not resized) when
// obj's type offers the exchange API; false when it does not (use `__dlpack__`). Throws
// nb::python_error when the producer refuses the tensor.
bool exchange_view(PyObject *obj, nanobind::dlpack::dltensor &out);

}  // namespace gdn_python
