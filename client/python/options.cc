#include "client/python/options.h"

#include <pybind11/stl.h>

#include <climits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/text.h"

namespace py = pybind11;

namespace prepflow::python {
namespace {

using Row = OptionField<LoaderOptions>;

[[noreturn]] void Wrong(const Row& row, const char* expected, const py::handle& value) {
  throw py::type_error(
      absl::StrCat(row.key, ": expected ", expected, ", got ", Py_TYPE(value.ptr())->tp_name));
}

// An int (or anything with __index__, as numpy's), not a bool.
bool IsInteger(const py::handle& value) {
  return PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr());
}

int64_t ToInt64(const Row& row, const py::handle& value) {
  py::int_ index = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error(
        absl::StrCat(row.key, ": ", py::repr(value).cast<std::string>(), " is out of range"));
  }
  return x;
}

// A path or text as bytes: os.fsencode, so a file name that is not UTF-8
// arrives as its bytes.
std::string ToBytes(const py::handle& value) {
  return py::module_::import("os").attr("fsencode")(value).cast<std::string>();
}

bool IsText(const py::handle& value) {
  return py::isinstance<py::str>(value) || py::isinstance<py::bytes>(value) ||
         py::hasattr(value, "__fspath__");
}

OptionValue ToList(const Row& row, const py::handle& value) {
  if (py::isinstance<py::str>(value)) return cli::SplitList(value.cast<std::string>());
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
    Wrong(row, "a list of str or one comma-separated str", value);
  }
  std::vector<std::string> out;
  for (const py::handle item : value) {
    if (!py::isinstance<py::str>(item)) Wrong(row, "a list of str", item);
    out.push_back(item.cast<std::string>());
  }
  return out;
}

OptionValue ToMap(const Row& row, const py::handle& value) {
  if (py::isinstance<py::str>(value)) {
    auto pairs = cli::ParseKeyValues(value.cast<std::string>(), row.key);
    if (!pairs.ok()) throw py::value_error(SafeText(pairs.status().message()));
    return *std::move(pairs);
  }
  if (!py::isinstance<py::dict>(value)) Wrong(row, "a dict or 'k=v,...'", value);
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : value.cast<py::dict>()) {
    out[py::str(k).cast<std::string>()] = py::str(v).cast<std::string>();
  }
  return out;
}

// `value` as `row`'s kind wants it; None is std::monostate (the default).
OptionValue FromPython(const Row& row, const py::handle& value) {
  if (value.is_none()) return std::monostate();
  switch (row.kind) {
    case OptionKind::kBool:
      if (!PyBool_Check(value.ptr()) && !IsInteger(value)) Wrong(row, "a bool", value);
      return PyObject_IsTrue(value.ptr()) == 1;
    case OptionKind::kInt:
      if (!IsInteger(value)) Wrong(row, "an int", value);
      return ToInt64(row, value);
    case OptionKind::kUint: {
      if (!IsInteger(value)) Wrong(row, "an int", value);
      py::int_ index = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
      const unsigned long long x = PyLong_AsUnsignedLongLong(index.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw py::value_error(absl::StrCat(row.key, ": must be 0 to 2**64-1, got ",
                                           py::repr(value).cast<std::string>()));
      }
      return static_cast<uint64_t>(x);
    }
    case OptionKind::kDouble:
      if (!PyFloat_Check(value.ptr()) && !IsInteger(value)) Wrong(row, "a number", value);
      return value.cast<double>();
    case OptionKind::kString:
      if (!IsText(value)) Wrong(row, "a str", value);
      return ToBytes(value);
    case OptionKind::kList:
      return ToList(row, value);
    case OptionKind::kMap:
      return ToMap(row, value);
    case OptionKind::kIntOrAuto:
      if (py::isinstance<py::str>(value)) return value.cast<std::string>();
      if (!IsInteger(value)) Wrong(row, "an int or \"auto\"", value);
      return ToInt64(row, value);
  }
  return std::monostate();
}

py::object ToPython(const OptionValue& value) {
  struct Convert {
    py::object operator()(std::monostate) const { return py::none(); }
    py::object operator()(bool b) const { return py::bool_(b); }
    py::object operator()(int64_t i) const { return py::int_(i); }
    py::object operator()(uint64_t u) const { return py::int_(u); }
    py::object operator()(double d) const { return py::float_(d); }
    py::object operator()(const std::string& s) const { return py::str(SafeText(s)); }
    py::object operator()(const std::vector<std::string>& list) const {
      return py::tuple(py::cast(list));
    }
    py::object operator()(const std::map<std::string, std::string>& map) const {
      return py::cast(map);
    }
  };
  return std::visit(Convert{}, value);
}

}  // namespace

void SetKeywordOptions(const py::dict& keywords, LoaderOptions* options) {
  std::map<std::string, OptionValue> values;
  for (const Row& row : LoaderOptionFields()) {
    if (keywords.contains(row.key)) values[row.key] = FromPython(row, keywords[row.key]);
  }
  options->surface = OptionSurface::kPython;
  const absl::Status s = SetOptions(LoaderOptionFields(), values, OptionSurface::kPython, options);
  if (!s.ok()) throw py::value_error(SafeText(s.message()));
}

void BindOptions(py::module_& m) {
  m.def(
      "loader_option_defaults",
      [] {
        py::dict out;
        for (const auto& [key, value] : OptionDefaults(LoaderOptionFields())) {
          out[py::str(key)] = ToPython(value);
        }
        return out;
      },
      "{keyword: default} of every Loader option (one table: docs/options.md).");
  m.def(
      "loader_option_rows",
      [] {
        py::list out;
        for (const Row& row : LoaderOptionFields()) {
          out.append(py::make_tuple(row.key, row.flag, OptionKindName(row.kind), row.help,
                                    row.python_keyword));
        }
        return out;
      },
      "(keyword, flag, kind, help, is_keyword) of every Loader option, in --help order.");
  m.def(
      "check_loader_options",
      [](const py::dict& keywords) {
        LoaderOptions scratch;
        SetKeywordOptions(keywords, &scratch);
      },
      "Raises TypeError or ValueError, naming the keyword, for a value a Loader would refuse.");
}

}  // namespace prepflow::python
