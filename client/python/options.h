// The Loader's options in Python: keywords converted by their rows of
// LoaderOptionFields() (client/loader_options.h), and the table exported so
// that prepflow.Loader takes its defaults and help from it.
//
// Thread-safety: call with the GIL held.
#ifndef PREPFLOW_CLIENT_PYTHON_OPTIONS_H_
#define PREPFLOW_CLIENT_PYTHON_OPTIONS_H_

#include <pybind11/pybind11.h>

#include "client/loader_options.h"

namespace prepflow::python {

// Every option `keywords` names, set on `options` by its row: TypeError for a
// value of the wrong type, ValueError for one out of bounds, each naming the
// keyword. Keys no row has are left alone (data, pipeline, metrics_port).
void SetKeywordOptions(const pybind11::dict& keywords, LoaderOptions* options);

// loader_option_defaults(), loader_option_rows(), check_loader_options().
void BindOptions(pybind11::module_& m);

}  // namespace prepflow::python

#endif  // PREPFLOW_CLIENT_PYTHON_OPTIONS_H_
