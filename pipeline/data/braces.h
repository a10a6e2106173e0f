// Brace expansion of shard lists, as WebDataset users write them (the
// `braceexpand` package's rules, which bash's mostly share):
//
//   shard-{000000..000099}.tar   a numeric range, inclusive; zero-padded to
//                                the wider of the two ends when either is
//   {0..10..2}, {9..0}           with a step; counting down
//   {a..e}                       a range of single letters
//   {train,val}/x.tar            alternatives, nested braces allowed
//   a-{0..1}-{x,y}.tar           several braces: every combination, the
//                                leftmost varying slowest
//   \{ \} \, \\                  a literal character
//
// A brace with neither a comma nor a range (`{}`, `{x}`) is literal text, as
// in braceexpand. A pattern is at most 4096 bytes with braces nested at most
// 32 deep (a hostile one costs microseconds). Thread-safe: pure functions.
#ifndef PREPFLOW_PIPELINE_DATA_BRACES_H_
#define PREPFLOW_PIPELINE_DATA_BRACES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace prepflow {

inline constexpr size_t kDefaultMaxExpansions = 1'000'000;
inline constexpr size_t kDefaultMaxExpansionBytes = 64 << 20;

// True when `pattern` has an unescaped '{' that brace expansion would act on.
bool HasBraces(absl::string_view pattern);

// Every name `pattern` expands to, in order. InvalidArgument naming the
// pattern for an unclosed or unopened brace, a range whose ends are not both
// numbers or both letters, a zero step, or an expansion of more than
// `max_names` names or `max_bytes` bytes of names (both checked before any
// is built, so `{0..999999999999}` costs nothing).
absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern,
                                                      size_t max_names = kDefaultMaxExpansions,
                                                      size_t max_bytes = kDefaultMaxExpansionBytes);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_BRACES_H_
