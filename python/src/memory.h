// gdn._gdn's memory advice for large host tensors (memory.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;

namespace gdn_python {

// Adds advise_huge_pages to the module.
void bind_memory(nb::module_ &m);

}  // namespace gdn_python
