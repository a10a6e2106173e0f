#include "client/stats_json.h"

#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "base/text.h"

namespace prepflow {
namespace {

using Json = nlohmann::json;

Json ToJson(const StatValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
          return SafeText(v);
        } else {
          return v;
        }
      },
      value);
}

template <typename Record>
Json RecordJson(const Record& record, const std::vector<StatField<Record>>& fields) {
  Json out = Json::object();
  for (const StatField<Record>& f : fields) out[f.key] = ToJson(f.get(record));
  return out;
}

template <typename Record>
Json ListJson(const std::vector<Record>& records, const std::vector<StatField<Record>>& fields) {
  Json out = Json::array();
  for (const Record& r : records) out.push_back(RecordJson(r, fields));
  return out;
}

}  // namespace

Json StagesJson(const std::vector<StageStats>& stages) {
  return ListJson(stages, StageStatFields());
}

Json StatsJson(const LoaderStats& stats) {
  Json out = RecordJson(stats, LoaderStatFields());
  VisitStatLists(stats, [&out](const char* key, const auto& records, const auto& fields) {
    out[key] = ListJson(records, fields);
  });
  return out;
}

}  // namespace prepflow
