// LoaderStats as JSON (the `prepflow run --json` summary), rendered from the
// field tables in loader_stats.h.
//
// Thread-safety: a pure function.
#ifndef PREPFLOW_CLIENT_STATS_JSON_H_
#define PREPFLOW_CLIENT_STATS_JSON_H_

#include <vector>

#include "client/loader_stats.h"
#include "nlohmann/json.hpp"

namespace prepflow {

// Every field of LoaderStatFields() and every list (VisitStatLists). Text is
// passed through SafeText.
nlohmann::json StatsJson(const LoaderStats& stats);
// Stage entries alone (StageStatFields), as `prepflow profile` prints them.
nlohmann::json StagesJson(const std::vector<StageStats>& stages);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_STATS_JSON_H_
