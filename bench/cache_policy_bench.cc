// The sample cache's policy against LRU and the ideal, when each epoch visits
// every sample once in a fresh random order (what a training job does).
//
// For each cache size (a fraction of the dataset's bytes) it runs `--epochs`
// epochs through SampleCache (stable priority: pipeline/reuse/sample_cache.h) and
// through an LRU of the same byte budget, and reports each one's hit ratio
// over the epochs after the first, and the bytes it wrote then (churn). The
// ideal for an order the cache cannot know is cache/dataset. Sample sizes are
// those of the files under --data (cycled), scaled by 1/--scale, or a
// log-normal spread around 110 KB when none is given. Prints one JSON line.
//
//   cache_policy_bench [--data DIR] [--samples 20000] [--epochs 5]
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <list>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "pipeline/reuse/sample_cache.h"

namespace {

void FileSizes(const std::string& dir, std::vector<int64_t>* out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      FileSizes(path, out);
    } else if (S_ISREG(st.st_mode)) {
      out->push_back(st.st_size);
    }
  }
  closedir(d);
}

class Lru {
 public:
  explicit Lru(int64_t capacity) : capacity_(capacity) {}
  bool Find(int64_t key) {
    auto it = where_.find(key);
    if (it == where_.end()) return false;
    order_.splice(order_.begin(), order_, it->second);
    return true;
  }
  // Returns the bytes written.
  int64_t Insert(int64_t key, int64_t size) {
    if (size > capacity_) return 0;
    while (used_ + size > capacity_) {
      const auto& [k, s] = order_.back();
      used_ -= s;
      where_.erase(k);
      order_.pop_back();
    }
    order_.emplace_front(key, size);
    where_[key] = order_.begin();
    used_ += size;
    return size;
  }

 private:
  int64_t capacity_;
  int64_t used_ = 0;
  std::list<std::pair<int64_t, int64_t>> order_;
  std::unordered_map<int64_t, std::list<std::pair<int64_t, int64_t>>::iterator> where_;
};

struct Outcome {
  double hit_ratio = 0;      // over epochs 2..E
  double written_bytes = 0;  // per epoch, over epochs 2..E
};

// Runs the epochs' orders through the sample cache (`stable`) and an LRU of
// `capacity` bytes each; hit ratios and bytes written per epoch, epochs 2..E.
void Simulate(int64_t capacity, const std::vector<std::vector<int64_t>>& orders,
              const std::vector<int64_t>& sizes, int scale, Outcome* s, Outcome* l) {
  const int epochs = static_cast<int>(orders.size());
  prepflow::SampleCacheOptions o;
  o.ram_bytes = capacity;
  auto stable = *prepflow::SampleCache::Open(o);
  Lru lru(capacity);
  int64_t later = 0;
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i : orders[e]) {
      const prepflow::CacheKey key{7, i};
      const bool s_hit = stable->Find(key, 0) != nullptr;
      if (!s_hit && stable->Wants(key, sizes[i])) {
        stable->Insert(key, 0, std::make_shared<const std::string>(sizes[i], 'x'));
        if (e > 0) s->written_bytes += static_cast<double>(sizes[i]);
      }
      const bool l_hit = lru.Find(i);
      if (!l_hit) {
        const int64_t w = lru.Insert(i, sizes[i]);
        if (e > 0) l->written_bytes += static_cast<double>(w);
      }
      if (e > 0) {
        s->hit_ratio += s_hit;
        l->hit_ratio += l_hit;
        ++later;
      }
    }
  }
  for (Outcome* out : {s, l}) {
    out->hit_ratio /= static_cast<double>(later);
    out->written_bytes = out->written_bytes * scale / (epochs - 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, fractions_text = "0.1,0.25,0.5,0.75,0.9,1.0";
  int samples = 20000, epochs = 5, scale = 64;
  uint64_t seed = 1;
  prepflow::cli::FlagSet flags("cache_policy_bench",
                               "The sample cache's policy against LRU and the ideal.");
  flags.String("data", &data, "take sample sizes from the files below this folder");
  flags.Int("samples", &samples, "samples in the simulated dataset");
  flags.Int("epochs", &epochs, "epochs, each in a fresh random order");
  flags.Int("scale", &scale, "divide sizes by this (the ratios do not change)");
  flags.String("fractions", &fractions_text, "cache sizes, as fractions of the dataset's bytes");
  flags.Uint("seed", &seed, "seed of the epoch orders");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;

  std::vector<int64_t> files;
  if (!data.empty()) FileSizes(data, &files);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> spread(std::log(110'000.0), 0.5);
  std::vector<int64_t> sizes(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const double bytes = files.empty() ? spread(rng) : static_cast<double>(files[i % files.size()]);
    sizes[i] = std::max<int64_t>(1, static_cast<int64_t>(bytes / scale));
  }
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  std::vector<std::vector<int64_t>> orders(static_cast<size_t>(epochs));
  for (auto& order : orders) {
    order.resize(static_cast<size_t>(samples));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
  }

  std::printf(
      "{\"samples\": %d, \"epochs\": %d, \"dataset_bytes\": %lld, \"sizes\": \"%s\", "
      "\"results\": [",
      samples, epochs, static_cast<long long>(total * scale),
      files.empty() ? "log-normal around 110 KB" : data.c_str());
  bool first = true;
  for (absl::string_view f : absl::StrSplit(fractions_text, ',')) {
    const double fraction = std::stod(std::string(f));
    const auto capacity = static_cast<int64_t>(fraction * static_cast<double>(total));
    Outcome s, l;
    Simulate(capacity, orders, sizes, scale, &s, &l);
    std::printf(
        "%s{\"cache_fraction\": %.2f, \"ideal_hit_ratio\": %.4f, "
        "\"stable_hit_ratio\": %.4f, \"lru_hit_ratio\": %.4f, "
        "\"stable_written_bytes_per_epoch\": %.0f, \"lru_written_bytes_per_epoch\": %.0f}",
        first ? "" : ", ", fraction, std::min(1.0, fraction), s.hit_ratio, l.hit_ratio,
        s.written_bytes, l.written_bytes);
    first = false;
  }
  std::printf("]}\n");
  return 0;
}
