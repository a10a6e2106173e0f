// The op schema, plugins, and what the parity tests draw (the draws of
// random stages, for torchvision's kernels), bound for Python.
#ifndef PREPFLOW_CLIENT_PYTHON_OP_BINDINGS_H_
#define PREPFLOW_CLIENT_PYTHON_OP_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace prepflow::python {

void BindOps(pybind11::module_& m);
void BindDraws(pybind11::module_& m);

}  // namespace prepflow::python

#endif  // PREPFLOW_CLIENT_PYTHON_OP_BINDINGS_H_
