// The consumer side of the DLPack C exchange API, declared here from the DLPack standard
// (dlpack.h, DLPackExchangeAPI) so that the extension needs no framework's headers.
#include "exchange.h"

#include <cstdint>

namespace nb = nanobind;

namespace gdn_python {
namespace {

struct Version {
    uint32_t major, minor;
};

struct ApiHeader {
    Version version;
    ApiHeader *prev_api;
};

// The table a producer publishes; only view_no_sync is called here, the others are declared for
// the layout.
struct ExchangeApi {
    ApiHeader header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*view_no_sync)(void *py_object, nb::dlpack::dltensor *out);  // may be NULL
    void *current_work_stream;
};

constexpr uint32_t kMajorVersion = 1;

// The table for a type, or nullptr when it has none we can use. Looked up at every call (an
// attribute lookup on the type: tens of nanoseconds), so that no type pointer is kept.
const ExchangeApi *api_of(PyTypeObject *type) {
    static PyObject *name = PyUnicode_InternFromString("__dlpack_c_exchange_api__");  // under the GIL
    PyObject *capsule = PyObject_GetAttr(reinterpret_cast<PyObject *>(type), name);
    if (capsule == nullptr) {
        PyErr_Clear();
        return nullptr;
    }
    const ExchangeApi *api = nullptr;
    if (PyCapsule_IsValid(capsule, "dlpack_exchange_api")) {
        auto *table = static_cast<const ExchangeApi *>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
        // A newer major version may be chained to an older one this code understands.
        for (const ApiHeader *h = table ? &table->header : nullptr; h != nullptr; h = h->prev_api) {
            if (h->version.major == kMajorVersion) {
                api = reinterpret_cast<const ExchangeApi *>(h);
                break;
            }
        }
        if (api != nullptr && api->view_no_sync == nullptr) api = nullptr;
    }
    Py_DECREF(capsule);  // the table itself lives as long as the producer's module
    return api;
}

}  // namespace

bool exchange_view(PyObject *obj, nb::dlpack::dltensor &out) {
    const ExchangeApi *api = api_of(Py_TYPE(obj));
    if (api == nullptr) return false;
    if (api->view_no_sync(obj, &out) != 0) throw nb::python_error();
    return true;
}

}  // namespace gdn_python
