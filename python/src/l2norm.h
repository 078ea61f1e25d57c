// gdn._gdn's row normalisation helpers for use_qk_l2norm_in_kernel (l2norm.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;

namespace gdn_python {

// Adds l2norm_rows and l2norm_rows_backward to the module.
void bind_l2norm(nb::module_ &m);

}  // namespace gdn_python
