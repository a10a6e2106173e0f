// Option tables: each option of a record (LoaderOptions, a worker's storage
// reads) defined once, as a row that every surface walks.
//
// A row names the option on each surface: `key`, the Python keyword (also
// the name in docs and the C++ member's usual name), and `flag`, the
// command-line flag without its dashes. It says what kind of value it
// takes, carries its help line, a setter that checks a value and stores it,
// and a getter that reads it back (so a default exists once, in the record's
// member initializers, and the table reads it from a default-made record).
//
// Surfaces: the command line registers one flag per row (RegisterOptionFlags,
// base/flags.h); the Python binding converts each keyword by its row's kind
// and calls the same setter; docs render the rows (OptionsMarkdown). A
// setter's error names the option as the surface that set it spells it:
// "--batch: must be 1 to 1048576, got 0" on the command line, "batch_size:
// must be ..." from Python.
//
// The row helpers below (IntOption, DoubleOption, ...) take the member as a
// member pointer (&LoaderOptions::batch_size) or, for a nested one, a lambda
// `[](auto& o) -> auto& { return o.http.max_attempts; }`.
//
// Thread-safety: rows are immutable values, tables are built once (each
// table function returns a function-local static); all functions are pure.
#ifndef PREPFLOW_BASE_OPTIONS_H_
#define PREPFLOW_BASE_OPTIONS_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/flags.h"

namespace prepflow {

// Who set an option: its errors name it as that surface spells it.
enum class OptionSurface { kCommandLine, kPython };

// What a row takes. kIntOrAuto: an integer, or "auto".
enum class OptionKind { kBool, kInt, kUint, kDouble, kString, kList, kMap, kIntOrAuto };

// A value as a surface hands it over, already of the row's kind (an integer
// row gets an int64_t, a list row a vector). std::monostate: Python's None,
// which leaves the option at its default; "auto" arrives as the string.
using OptionValue = std::variant<std::monostate, bool, int64_t, uint64_t, double, std::string,
                                 std::vector<std::string>, std::map<std::string, std::string>>;

template <typename Options>
struct OptionField {
  const char* key;   // Python keyword: "batch_size"
  const char* flag;  // command-line flag: "batch"
  OptionKind kind;
  const char* help;
  // Checks `value` and stores it in `options`. InvalidArgument naming the
  // option as `name` (the caller's spelling of it) and the value at fault.
  std::function<absl::Status(Options& options, const OptionValue& value, const std::string& name)>
      set;
  std::function<OptionValue(const Options& options)> get;
  // False for options a Python program sets another way (resuming is
  // load_state_dict(), not a keyword); the binding still accepts the key.
  bool python_keyword = true;
  // The default as docs and --help show it, where the value depends on the
  // machine ($HOME); Python then gets None for it (the same default).
  const char* shown_default = nullptr;

  std::string NameOn(OptionSurface surface) const {
    return surface == OptionSurface::kPython ? key : absl::StrCat("--", flag);
  }
};

// What the command line gives, as a value of `kind`: "64" for kInt, "a,b"
// for kList, "k=v,k2=v2" for kMap. kIntOrAuto: an integer, else the text
// (the row says what words it takes).
// InvalidArgument "NAME: 'TEXT' is not ..." naming `name`. (An out
// parameter: GCC 12 misreads a StatusOr of this variant as uninitialized.)
absl::Status ParseOptionText(OptionKind kind, const std::string& text, const std::string& name,
                             OptionValue* value);
// A value as the command line writes it (the default in --help and docs):
// "" for std::monostate.
std::string OptionText(const OptionValue& value);
// "an integer", "a number", "a list of strings": what a kind is, for errors
// and docs.
const char* OptionKindName(OptionKind kind);

// Every row of `table` read from `options` and checked again, as the
// surface names them: a record filled in by other means (a C++ caller, a
// resumed state) is held to the same bounds.
template <typename Options>
absl::Status CheckOptions(const std::vector<OptionField<Options>>& table, const Options& options,
                          OptionSurface surface) {
  Options scratch = options;
  for (const OptionField<Options>& row : table) {
    if (absl::Status s = row.set(scratch, row.get(options), row.NameOn(surface)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Sets each option of `values` (by key, each of its row's kind) in
// `*options`, in table order. Errors name the option as `surface` spells
// it; a key no row has is InvalidArgument too.
template <typename Options>
absl::Status SetOptions(const std::vector<OptionField<Options>>& table,
                        const std::map<std::string, OptionValue>& values, OptionSurface surface,
                        Options* options) {
  size_t used = 0;
  for (const OptionField<Options>& row : table) {
    const auto it = values.find(row.key);
    if (it == values.end()) continue;
    ++used;
    if (absl::Status s = row.set(*options, it->second, row.NameOn(surface)); !s.ok()) return s;
  }
  if (used < values.size()) {
    for (const auto& [key, value] : values) {
      bool known = false;
      for (const OptionField<Options>& row : table) known = known || key == row.key;
      if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown option '", key, "'"));
    }
  }
  return absl::OkStatus();
}

// Each row's default (its value in a default-made record), by key; None
// (std::monostate) for a row with a shown_default.
template <typename Options>
std::map<std::string, OptionValue> OptionDefaults(const std::vector<OptionField<Options>>& table) {
  const Options defaults{};
  std::map<std::string, OptionValue> out;
  for (const OptionField<Options>& row : table) {
    out[row.key] = row.shown_default != nullptr ? OptionValue() : row.get(defaults);
  }
  return out;
}

// A Markdown table of `table`'s rows: flag, keyword, default, help.
template <typename Options>
std::string OptionsMarkdown(const std::vector<OptionField<Options>>& table) {
  const Options defaults{};
  std::string out = "| flag | Python keyword | default | |\n|---|---|---|---|\n";
  for (const OptionField<Options>& row : table) {
    const std::string value =
        row.shown_default != nullptr ? row.shown_default : OptionText(row.get(defaults));
    absl::StrAppend(&out, "| `--", row.flag, "` | ", row.python_keyword ? row.key : "", " | ",
                    value.empty() ? "" : absl::StrCat("`", value, "`"), " | ",
                    absl::StrReplaceAll(row.help, {{"|", "\\|"}}), " |\n");
  }
  return out;
}

// One flag per row of `table` on `flags`, each storing into `*options` as
// it is parsed (checked by its row: the error names the flag). --help shows
// the values `*options` holds when registered. The flags refer to the rows:
// `table` must outlive `flags` (the tables of *OptionFields() are static).
template <typename Options>
void RegisterOptionFlags(cli::FlagSet& flags, const std::vector<OptionField<Options>>& table,
                         Options* options) {
  for (const OptionField<Options>& row : table) {
    const std::string shown =
        row.shown_default != nullptr ? row.shown_default : OptionText(row.get(*options));
    flags.Add(row.flag, row.help, shown, row.kind == OptionKind::kBool,
              [&row, options](const std::string& text) -> absl::Status {
                const std::string name = row.NameOn(OptionSurface::kCommandLine);
                OptionValue value;
                if (absl::Status s = ParseOptionText(row.kind, text, name, &value); !s.ok()) {
                  return s;
                }
                return row.set(*options, value, name);
              });
  }
}

// A row wrapped to act on a part of a larger record: `part(outer)` is the
// inner record, for a const record too (a generic lambda:
// `[](auto& o) -> auto& { return o.storage; }`).
template <typename Outer, typename Inner, typename Part>
OptionField<Outer> Lift(const OptionField<Inner>& row, Part part) {
  OptionField<Outer> out{row.key, row.flag, row.kind,           row.help,
                         nullptr, nullptr,  row.python_keyword, row.shown_default};
  out.set = [set = row.set, part](Outer& o, const OptionValue& v, const std::string& name) {
    return set(part(o), v, name);
  };
  out.get = [get = row.get, part](const Outer& o) { return get(part(o)); };
  return out;
}

template <typename Outer, typename Inner, typename Part>
void AppendLifted(std::vector<OptionField<Outer>>* table,
                  const std::vector<OptionField<Inner>>& rows, Part part) {
  for (const OptionField<Inner>& row : rows) table->push_back(Lift<Outer>(row, part));
}

// `row` with its default shown as `text` (see shown_default).
template <typename Options>
OptionField<Options> ShownDefault(OptionField<Options> row, const char* text) {
  row.shown_default = text;
  return row;
}

// `row` without a Python keyword (see python_keyword).
template <typename Options>
OptionField<Options> NoKeyword(OptionField<Options> row) {
  row.python_keyword = false;
  return row;
}

namespace options_internal {

absl::Status OutOfBounds(const std::string& name, const std::string& bounds,
                         const std::string& got);
// "positive", ">= 0", "0 to 60": a number's bounds in words.
std::string Bounds(double min, double max, bool min_open);

// The member `access` names in `o`: a member pointer or a callable.
template <typename Access, typename Options>
decltype(auto) Member(Access access, Options& o) {
  return std::invoke(access, o);
}

}  // namespace options_internal

// An integer within [min, max], read by `get(options)` and stored by
// `set(options, value)`. None leaves the default.
template <typename Options, typename Get, typename Set>
OptionField<Options> IntOptionVia(const char* key, const char* flag, Get get, Set set, int64_t min,
                                  int64_t max, const char* help) {
  OptionField<Options> row{key, flag, OptionKind::kInt, help, nullptr, nullptr};
  row.set = [set, min, max](Options& o, const OptionValue& v, const std::string& name) {
    if (std::holds_alternative<std::monostate>(v)) return absl::OkStatus();
    const int64_t x = std::get<int64_t>(v);
    if (x < min || x > max) {
      return options_internal::OutOfBounds(
          name,
          max == std::numeric_limits<int64_t>::max() || max == std::numeric_limits<int>::max()
              ? absl::StrCat("at least ", min)
              : absl::StrCat(min, " to ", max),
          absl::StrCat(x));
    }
    set(o, x);
    return absl::OkStatus();
  };
  row.get = [get](const Options& o) -> OptionValue { return static_cast<int64_t>(get(o)); };
  return row;
}

// An integer member (int or int64_t), within [min, max].
template <typename Options, typename Access>
OptionField<Options> IntOption(const char* key, const char* flag, Access access, int64_t min,
                               int64_t max, const char* help) {
  return IntOptionVia<Options>(
      key, flag, [access](const Options& o) { return options_internal::Member(access, o); },
      [access](Options& o, int64_t x) {
        auto& member = options_internal::Member(access, o);
        member = static_cast<std::remove_reference_t<decltype(member)>>(x);
      },
      min, max, help);
}

// A number within [min, max] (above `min` when `min_open`), read and stored
// as IntOptionVia's.
template <typename Options, typename Get, typename Set>
OptionField<Options> DoubleOptionVia(const char* key, const char* flag, Get get, Set set,
                                     double min, double max, bool min_open, const char* help) {
  OptionField<Options> row{key, flag, OptionKind::kDouble, help, nullptr, nullptr};
  row.set = [set, min, max, min_open](Options& o, const OptionValue& v, const std::string& name) {
    if (std::holds_alternative<std::monostate>(v)) return absl::OkStatus();
    const double x = std::get<double>(v);
    if (!(min_open ? x > min : x >= min) || !(x <= max) || !std::isfinite(x)) {
      return options_internal::OutOfBounds(name, options_internal::Bounds(min, max, min_open),
                                           absl::StrCat(x));
    }
    set(o, x);
    return absl::OkStatus();
  };
  row.get = [get](const Options& o) -> OptionValue { return static_cast<double>(get(o)); };
  return row;
}

// A double member, within [min, max] (above `min` when `min_open`).
template <typename Options, typename Access>
OptionField<Options> DoubleOption(const char* key, const char* flag, Access access, double min,
                                  double max, bool min_open, const char* help) {
  return DoubleOptionVia<Options>(
      key, flag, [access](const Options& o) { return options_internal::Member(access, o); },
      [access](Options& o, double x) { options_internal::Member(access, o) = x; }, min, max,
      min_open, help);
}

template <typename Options, typename Access>
OptionField<Options> BoolOption(const char* key, const char* flag, Access access,
                                const char* help) {
  OptionField<Options> row{key, flag, OptionKind::kBool, help, nullptr, nullptr};
  row.set = [access](Options& o, const OptionValue& v, const std::string&) {
    if (!std::holds_alternative<std::monostate>(v))
      options_internal::Member(access, o) = std::get<bool>(v);
    return absl::OkStatus();
  };
  row.get = [access](const Options& o) -> OptionValue {
    return static_cast<bool>(options_internal::Member(access, o));
  };
  return row;
}

// A text member, any text (a file name, a host). None leaves the default.
template <typename Options, typename Access>
OptionField<Options> StringOption(const char* key, const char* flag, Access access,
                                  const char* help) {
  OptionField<Options> row{key, flag, OptionKind::kString, help, nullptr, nullptr};
  row.set = [access](Options& o, const OptionValue& v, const std::string&) {
    if (!std::holds_alternative<std::monostate>(v))
      options_internal::Member(access, o) = std::get<std::string>(v);
    return absl::OkStatus();
  };
  row.get = [access](const Options& o) -> OptionValue {
    return std::string(options_internal::Member(access, o));
  };
  return row;
}

// Text parsed into a value: `parse(text)` gives it (or an error that quotes
// the text; the row adds the option's name), `store(options, value)` keeps
// it, `show(options)` gives it back as an OptionValue.
template <typename Options, typename Parse, typename Store, typename Show>
OptionField<Options> ParsedOption(const char* key, const char* flag, Parse parse, Store store,
                                  Show show, const char* help) {
  OptionField<Options> row{key, flag, OptionKind::kString, help, nullptr, nullptr};
  row.set = [parse, store](Options& o, const OptionValue& v, const std::string& name) {
    if (std::holds_alternative<std::monostate>(v)) return absl::OkStatus();
    auto parsed = parse(std::get<std::string>(v));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", parsed.status().message()));
    }
    store(o, *std::move(parsed));
    return absl::OkStatus();
  };
  row.get = [show](const Options& o) -> OptionValue { return show(o); };
  return row;
}

// A member chosen by name: `parse` maps a name to the value (InvalidArgument
// listing the names), `name_of` back.
template <typename Options, typename Access, typename Parse, typename NameOf>
OptionField<Options> ChoiceOption(const char* key, const char* flag, Access access, Parse parse,
                                  NameOf name_of, const char* help) {
  return ParsedOption<Options>(
      key, flag, parse,
      [access](Options& o, auto value) { options_internal::Member(access, o) = std::move(value); },
      [access, name_of](const Options& o) -> OptionValue {
        return std::string(name_of(options_internal::Member(access, o)));
      },
      help);
}

}  // namespace prepflow

#endif  // PREPFLOW_BASE_OPTIONS_H_
