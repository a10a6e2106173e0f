// The options table (base/options.h, client/loader_option_fields.cc): one row
// is an option on every surface.
#include "client/loader_options.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/pipeline.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

// A row the product does not have, kept outside LoaderOptions.
int64_t widgets = 0;

std::vector<OptionField<LoaderOptions>> TableWithWidgets() {
  std::vector<OptionField<LoaderOptions>> table = LoaderOptionFields();
  widgets = 7;
  table.push_back(IntOptionVia<LoaderOptions>(
      "widget_count", "widget-count", [](const LoaderOptions&) { return widgets; },
      [](LoaderOptions&, int64_t n) { widgets = n; }, 1, 100, "widgets per sample"));
  return table;
}

TEST(OptionTableTest, OneRowIsAFlagAKeywordAHelpLineAndADocsRow) {
  const auto table = TableWithWidgets();
  // The docs: a row of the table; Python: a keyword with its default.
  EXPECT_THAT(OptionsMarkdown(table),
              HasSubstr("| `--widget-count` | widget_count | `7` | widgets per sample |"));
  EXPECT_EQ(std::get<int64_t>(OptionDefaults(table).at("widget_count")), 7);
  LoaderOptions options;
  cli::FlagSet flags("prepflow run", "test");
  RegisterOptionFlags(flags, table, &options);
  // --help: its line, with the default read from the row.
  bool listed = false;
  for (absl::string_view line : absl::StrSplit(flags.Usage(), '\n')) {
    if (absl::StrContains(line, "--widget-count")) {
      EXPECT_THAT(line, HasSubstr("widgets per sample (default 7)"));
      listed = true;
    }
  }
  EXPECT_TRUE(listed) << flags.Usage();
  // The command line sets it, checked, naming the flag.
  std::vector<std::string> args = {"prepflow", "--widget-count", "9"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1).ok());
  EXPECT_EQ(widgets, 9);
  args[2] = "0";
  argv = {args[0].data(), args[1].data(), args[2].data()};
  EXPECT_THAT(flags.Parse(3, argv.data(), 1).message(),
              HasSubstr("--widget-count: must be 1 to 100, got 0"));
  // Python: an error names the keyword.
  const absl::Status bad = SetOptions(table, {{"widget_count", OptionValue(int64_t{101})}},
                                      OptionSurface::kPython, &options);
  EXPECT_EQ(bad.message(), "widget_count: must be 1 to 100, got 101");
  ASSERT_TRUE(SetOptions(table, {{"widget_count", OptionValue(int64_t{3})}}, OptionSurface::kPython,
                         &options)
                  .ok());
  EXPECT_EQ(widgets, 3);
}

TEST(OptionTableTest, ErrorsNameTheOptionAsEachSurfaceSpellsIt) {
  LoaderOptions o;
  const auto& table = LoaderOptionFields();
  EXPECT_EQ(SetOptions(table, {{"batch_size", OptionValue(int64_t{0})}}, OptionSurface::kPython, &o)
                .message(),
            "batch_size: must be 1 to 1048576, got 0");
  EXPECT_EQ(
      SetOptions(table, {{"batch_size", OptionValue(int64_t{0})}}, OptionSurface::kCommandLine, &o)
          .message(),
      "--batch: must be 1 to 1048576, got 0");
  EXPECT_THAT(SetOptions(table, {{"offload", OptionValue(std::string("sideways"))}},
                         OptionSurface::kPython, &o)
                  .message(),
              HasSubstr("offload: 'sideways': unknown mode"));
  EXPECT_THAT(
      SetOptions(table, {{"bogus", OptionValue(int64_t{1})}}, OptionSurface::kPython, &o).message(),
      HasSubstr("unknown option 'bogus'"));
  // The planner's knobs: a share in [0, 1], factors >= 0, never NaN or inf.
  const double nan = std::nan("");
  for (const auto& [key, bad] : std::vector<std::pair<std::string, double>>{
           {"replan_probe_share", 1.5},
           {"replan_probe_share", -0.1},
           {"replan_min_gain", -1},
           {"replan_min_gain", nan},
           {"replan_link_growth", std::numeric_limits<double>::infinity()},
           {"prefetch_seconds", -1},
           {"prefetch_seconds", 61},
           {"prefetch_seconds", nan},
           {"prefetch_seconds", std::numeric_limits<double>::infinity()}}) {
    EXPECT_THAT(SetOptions(table, {{key, OptionValue(bad)}}, OptionSurface::kPython, &o).message(),
                HasSubstr(key + ": must be"))
        << key << " " << bad;
  }
  // Checked again when the loader starts, as the record's surface names it.
  LoaderOptions from_python;
  from_python.surface = OptionSurface::kPython;
  from_python.threads = 5000;
  EXPECT_THAT(ResolveOptions(from_python).status().message(),
              HasSubstr("threads: must be 0 to 1024, got 5000"));
  from_python.threads = 0;
  from_python.prefetch_seconds = std::numeric_limits<double>::infinity();
  EXPECT_THAT(ResolveOptions(from_python).status().message(),
              HasSubstr("prefetch_seconds: must be"));
  from_python.prefetch_seconds = 0.5;
  from_python.world_size = 2;
  from_python.rank = 2;
  EXPECT_THAT(ResolveOptions(from_python).status().message(),
              HasSubstr("rank/world_size: need 0 <= rank < world_size, got 2/2"));
}

// Workers named for a job are used: without --offload (or PREPFLOW_OFFLOAD)
// they mean auto; --offload off still keeps every sample here. The
// fidelity reaches the spec's resizing stages that name none.
TEST(ResolveOptionsTest, WorkersWithoutOffloadMeanAutoAndFidelityIsResolved) {
  unsetenv("PREPFLOW_OFFLOAD");
  LoaderOptions o;
  o.workers = {"127.0.0.1:7000"};
  o.pipeline = *LoadPipelineSpec(
      "stages { decode {} } stages { resize { shorter_side: 8 fidelity: FIDELITY_EXACT } } "
      "stages { random_apply { stages { random_resized_crop { size: 4 } } } }");
  o.fidelity = proto::FIDELITY_FAST;
  absl::StatusOr<LoaderOptions> r = ResolveOptions(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->offload->kind, OffloadMode::kAuto);
  EXPECT_EQ(r->pipeline.stages(1).resize().fidelity(), proto::FIDELITY_EXACT);
  EXPECT_EQ(r->pipeline.stages(2).random_apply().stages(0).random_resized_crop().fidelity(),
            proto::FIDELITY_FAST);
  o.offload = *ParseOffload("off");
  r = ResolveOptions(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->offload->kind, OffloadMode::kOff);
  o.workers.clear();
  o.offload.reset();
  r = ResolveOptions(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->offload->kind, OffloadMode::kOff);
  EXPECT_THAT(ParseFidelity("slow").status().message(),
              HasSubstr("expected exact or fast, got 'slow'"));
}

TEST(OptionTableTest, EveryRowRoundTripsItsDefaultAndHasOneName) {
  const auto& table = LoaderOptionFields();
  const LoaderOptions defaults;
  std::map<std::string, int> keys, flags;
  for (const auto& row : table) {
    SCOPED_TRACE(row.key);
    ++keys[row.key];
    ++flags[row.flag];
    EXPECT_NE(std::string(row.help), "");
    LoaderOptions o;
    ASSERT_TRUE(row.set(o, row.get(defaults), row.key).ok());
    EXPECT_EQ(OptionText(row.get(o)), OptionText(row.get(defaults)));
    if (row.kind != OptionKind::kString && row.kind != OptionKind::kList &&
        row.kind != OptionKind::kMap && !std::holds_alternative<std::monostate>(row.get(o))) {
      // What --help prints for the default parses back to it.
      OptionValue parsed;
      const absl::Status s =
          ParseOptionText(row.kind, OptionText(row.get(defaults)), row.flag, &parsed);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_TRUE(row.set(o, parsed, row.flag).ok());
      EXPECT_EQ(OptionText(row.get(o)), OptionText(row.get(defaults)));
    }
  }
  for (const auto& [key, n] : keys) EXPECT_EQ(n, 1) << key;
  for (const auto& [flag, n] : flags) EXPECT_EQ(n, 1) << flag;
  EXPECT_GT(table.size(), 55u);
}

}  // namespace
}  // namespace prepflow
