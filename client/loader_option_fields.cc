// LoaderOptions as rows (base/options.h): every option of a Loader, once.
// The command line (prepflow run, demo), the Python binding and
// docs/options.md walk this table; defaults are LoaderOptions' initializers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/loader_options.h"
#include "pipeline/core/rng.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"

namespace prepflow {
namespace {

using O = LoaderOptions;
using Rows = std::vector<OptionField<O>>;
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr double kNoMax = std::numeric_limits<double>::max();

const char* FormatName(proto::DatasetSpec::Format format) {
  switch (format) {
    case proto::DatasetSpec::FORMAT_IMAGEFOLDER:
      return "imagefolder";
    case proto::DatasetSpec::FORMAT_WEBDATASET:
      return "wds";
    case proto::DatasetSpec::FORMAT_MANIFEST:
      return "manifest";
    case proto::DatasetSpec::FORMAT_LINES:
      return "lines";
    default:
      return "auto";
  }
}
const char* OnErrorName(OnError e) { return e == OnError::kFail ? "fail" : "skip"; }
const char* RankSplitName(RankSplit s) {
  return s == RankSplit::kDrop ? "drop" : s == RankSplit::kUneven ? "uneven" : "pad";
}

// --mix text, "PATH:WEIGHT,PATH:WEIGHT,...": entries split at commas outside
// braces (a shard pattern's {a,b}), each at its last colon (a URL's
// scheme keeps its own).
absl::StatusOr<std::vector<proto::MixSource>> ParseMix(const std::string& text) {
  std::vector<std::string> entries(1);
  int depth = 0;
  for (char c : text) {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (c == ',' && depth == 0) {
      entries.emplace_back();
    } else {
      entries.back().push_back(c);
    }
  }
  std::vector<proto::MixSource> out;
  if (text.empty()) return out;
  for (const std::string& e : entries) {
    const size_t colon = e.rfind(':');
    double weight = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtod(e.substr(colon + 1), &weight) || !(weight > 0) ||
        !std::isfinite(weight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", SafeText(e), "': expected PATH:WEIGHT, a weight > 0 (e.g. 'a.tar:0.7,b/:0.3')"));
    }
    proto::MixSource source;
    source.set_path(e.substr(0, colon));
    source.set_weight(weight);
    out.push_back(std::move(source));
  }
  return out;
}

std::string MixText(const O& o) {
  std::string text;
  for (const proto::MixSource& s : o.dataset.mix()) {
    absl::StrAppend(&text, text.empty() ? "" : ",", s.path(), ":", s.weight());
  }
  return text;
}

// A stage boundary: K >= 0, or "auto" (stored as -1).
OptionField<O> BoundaryOption(const char* key, const char* flag, int O::*member, const char* help) {
  OptionField<O> row{key, flag, OptionKind::kIntOrAuto, help, nullptr, nullptr};
  row.set = [member](O& o, const OptionValue& v, const std::string& name) {
    if (std::holds_alternative<std::monostate>(v)) return absl::OkStatus();
    if (std::holds_alternative<std::string>(v)) {
      if (std::get<std::string>(v) != "auto") {
        return absl::InvalidArgumentError(absl::StrCat(name, ": '", std::get<std::string>(v),
                                                       "' is neither auto nor a stage boundary"));
      }
      o.*member = -1;
      return absl::OkStatus();
    }
    const int64_t k = std::get<int64_t>(v);
    if (k < -1 || k > kIntMax) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": must be auto or a stage boundary (0, 1, ...), got ", k));
    }
    o.*member = static_cast<int>(k);
    return absl::OkStatus();
  };
  row.get = [member](const O& o) -> OptionValue {
    if (o.*member < 0) return std::string("auto");
    return static_cast<int64_t>(o.*member);
  };
  return row;
}

// --echo: N copies, or auto.
OptionField<O> EchoOption() {
  OptionField<O> row{"echo",
                     "echo",
                     OptionKind::kIntOrAuto,
                     "data echoing: each sample loaded (up to --echo-at) yields this many copies "
                     "per epoch, each with its own random draws after it (1: none); or auto: "
                     "the planner picks each epoch's factor, the fewest copies that meet the "
                     "demand (--demand, else measured) when fresh samples cannot, up to "
                     "--max-echo",
                     nullptr,
                     nullptr};
  row.set = [](O& o, const OptionValue& v, const std::string& name) {
    if (std::holds_alternative<std::monostate>(v)) return absl::OkStatus();
    if (std::holds_alternative<std::string>(v)) {
      if (std::get<std::string>(v) != "auto") {
        return absl::InvalidArgumentError(absl::StrCat(name, ": '", std::get<std::string>(v),
                                                       "' is neither auto nor a number of copies"));
      }
      o.echo_auto = true;
      return absl::OkStatus();
    }
    const int64_t n = std::get<int64_t>(v);
    if (n < 1 || n >= static_cast<int64_t>(kMaxCopies)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": must be auto or 1 to ", kMaxCopies - 1, ", got ", n));
    }
    o.echo = static_cast<int>(n);
    o.echo_auto = false;
    return absl::OkStatus();
  };
  row.get = [](const O& o) -> OptionValue {
    if (o.echo_auto) return std::string("auto");
    return static_cast<int64_t>(o.echo);
  };
  return row;
}

OptionField<O> FormatOption() {
  return ParsedOption<O>(
      "format", "format", ParseDatasetFormat,
      [](O& o, proto::DatasetSpec::Format format) { o.dataset.set_format(format); },
      [](const O& o) -> OptionValue { return std::string(FormatName(o.dataset.format())); },
      "auto | imagefolder | wds | manifest | lines (auto: .tar shards are wds, a .json, .jsonl or "
      ".csv file a manifest, a folder an imagefolder; lines: every non-empty line of a file, of "
      "a brace pattern of files or of a folder's .jsonl and .txt files is a sample, a "
      "document)");
}

OptionField<O> OffloadOption() {
  return ParsedOption<O>(
      "offload", "offload", ParseOffload, [](O& o, OffloadMode mode) { o.offload = mode; },
      [](const O& o) -> OptionValue {
        if (!o.offload.has_value()) return std::monostate();
        return OffloadModeString(*o.offload);
      },
      "off | auto | remote | cut=K[,remote_fraction=F] (unset: $PREPFLOW_OFFLOAD, else off)");
}

template <typename T, typename Access>
OptionField<O> CollectionOption(const char* key, const char* flag, OptionKind kind, Access access,
                                const char* help) {
  OptionField<O> row{key, flag, kind, help, nullptr, nullptr};
  row.set = [access](O& o, const OptionValue& v, const std::string&) {
    if (!std::holds_alternative<std::monostate>(v)) std::invoke(access, o) = std::get<T>(v);
    return absl::OkStatus();
  };
  row.get = [access](const O& o) -> OptionValue { return std::invoke(access, o); };
  return row;
}

// The job's data and how it is read and batched; ranks.
Rows DataRows() {
  return {
      FormatOption(),
      IntOption<O>("batch_size", "batch", &O::batch_size, 1, kMaxBatch, "samples per batch"),
      IntOption<O>("threads", "threads", &O::threads, 0, kMaxThreads,
                   "preprocessing threads (0: every available CPU)"),
      NoKeyword(
          IntOption<O>("epochs", "epochs", &O::epochs, 1, kIntMax, "passes over the dataset")),
      NoKeyword(IntOption<O>("first_epoch", "start-epoch", &O::first_epoch, 0, kIntMax,
                             "resume: the first epoch to run (epochs counts from it)")),
      NoKeyword(IntOption<O>("skip_batches", "start-batch", &O::skip_batches, 0, kInt64Max,
                             "resume: batches of the first epoch already consumed")),
      NoKeyword(IntOption<O>("skip_samples", "start-sample", &O::skip_samples, 0, kInt64Max,
                             "resume: where the next batch starts in the first epoch's order "
                             "(the last batch's end_position; 0: where planned)")),
      OptionField<O>{"seed", "seed", OptionKind::kUint,
                     "job seed: shuffle order and every random augmentation",
                     [](O& o, const OptionValue& v, const std::string&) {
                       if (!std::holds_alternative<std::monostate>(v))
                         o.seed = std::get<uint64_t>(v);
                       return absl::OkStatus();
                     },
                     [](const O& o) -> OptionValue { return o.seed; }},
      ChoiceOption<O>("on_error", "on-error", &O::on_error, ParseOnError, OnErrorName,
                      "skip (report, count and go on) | fail (stop, exit 1)"),
      ChoiceOption<O>("fidelity", "fidelity", &O::fidelity, ParseFidelity, FidelityName,
                      "exact (torchvision's bytes: full-scale decodes, Pillow's filters) | fast "
                      "(bilinear from JPEGs decoded at 1/2 to 1/8 scale when shrinking 2x or "
                      "more, OpenCV's kernel; docs/ops.md's bounds): for resize and "
                      "random_resized_crop stages that set none"),
      IntOption<O>("max_pixels", "max-pixels", &O::max_pixels, 1, kInt64Max,
                   "refuse images whose header claims more pixels"),
      IntOptionVia<O>(
          "max_file_bytes", "max-file-bytes",
          [](const O& o) {
            return o.dataset.max_file_bytes() > 0 ? o.dataset.max_file_bytes()
                                                  : kDefaultMaxFileBytes;
          },
          [](O& o, int64_t x) { o.dataset.set_max_file_bytes(x); }, 1, kInt64Max,
          "refuse sample files larger than this"),
      IntOption<O>("max_jpeg_scans", "max-jpeg-scans", &O::max_jpeg_scans, 1, kIntMax,
                   "refuse progressive JPEGs with more scans than this (each is a pass over the "
                   "image)"),
      DoubleOption<O>("max_audio_seconds", "max-audio-seconds", &O::max_audio_seconds, 0,
                      kMaxAudioSeconds, true,
                      "refuse audio longer than this (its header's claim, checked before "
                      "decoding, and what is decoded)"),
      IntOption<O>("max_audio_channels", "max-audio-channels", &O::max_audio_channels, 1, 65535,
                   "refuse audio with more channels than this"),
      DoubleOption<O>("max_video_seconds", "max-video-seconds", &O::max_video_seconds, 0,
                      kMaxVideoSeconds, true,
                      "refuse videos longer than this (their header's claim, checked before "
                      "decoding)"),
      IntOption<O>("max_video_frames", "max-video-frames", &O::max_video_frames, 1, kIntMax,
                   "fail a clip that needs more frames decoded than this (from the keyframe "
                   "before it to its last frame)"),
      IntOptionVia<O>(
          "clips_per_video", "clips-per-video",
          [](const O& o) { return std::max(1, o.dataset.clips_per_video()); },
          [](O& o, int64_t x) { o.dataset.set_clips_per_video(static_cast<int>(x)); }, 1,
          kMaxClipsPerVideo,
          "read each video as this many samples, clip k of N (decode_video's SAMPLER_UNIFORM "
          "spaces them evenly; its other samplers draw each on its own)"),
      BoolOption<O>("shuffle", "shuffle", &O::shuffle,
                    "shuffle each epoch (--no-shuffle: dataset order)"),
      BoolOption<O>("drop_last", "drop-last", &O::drop_last, "drop each epoch's last short batch"),
      DoubleOption<O>("max_batch_seconds", "max-batch-seconds", &O::max_batch_seconds, 0, 1e9,
                      false,
                      "batch audio by length: each batch's samples x its longest within this "
                      "many seconds, at most --batch samples (0: batches of --batch)"),
      IntOption<O>("bucket_window", "bucket-window", &O::bucket_window, 1, kInt64Max,
                   "with --max-batch-seconds: samples sorted by length together (more: less "
                   "padding; fewer: batches mix more from epoch to epoch)"),
      IntOption<O>("prefetch", "prefetch", &O::prefetch_batches, 1, kMaxPrefetch,
                   "batches prepared ahead of the trainer"),
  };
}

// A weighted mixture of datasets (docs/mixtures.md).
Rows MixRows() {
  return {
      ParsedOption<O>(
          "mix", "mix", ParseMix,
          [](O& o, std::vector<proto::MixSource> sources) {
            o.dataset.clear_mix();
            for (proto::MixSource& s : sources) *o.dataset.add_mix() = std::move(s);
          },
          [](const O& o) -> OptionValue { return MixText(o); },
          "a weighted mixture of datasets instead of --data: 'PATH:WEIGHT,PATH:WEIGHT' (each "
          "next sample's source drawn by weight, the same at any thread count, placement and "
          "cut; docs/mixtures.md)"),
      IntOption<O>("mix_epoch_samples", "mix-epoch-samples", &O::mix_epoch_samples, 0,
                   int64_t{1} << 40,
                   "samples per epoch of a mixture, each source its share (0: the sum of the "
                   "sources)"),
      OptionField<O>{"require_fields", "require-fields", OptionKind::kList,
                     "leave out WebDataset records without one of these members (e.g. txt: "
                     "image-text pairs without a caption; jpg;png: either), as a filter",
                     [](O& o, const OptionValue& v, const std::string&) {
                       if (const auto* fields = std::get_if<std::vector<std::string>>(&v)) {
                         o.dataset.clear_require_fields();
                         for (const std::string& f : *fields) o.dataset.add_require_fields(f);
                       }
                       return absl::OkStatus();
                     },
                     [](const O& o) -> OptionValue {
                       return std::vector<std::string>(o.dataset.require_fields().begin(),
                                                       o.dataset.require_fields().end());
                     }},
      BoolOption<O>("mix_stop_at_first_end", "mix-stop-at-first-end", &O::mix_stop_at_first_end,
                    "end each epoch of a mixture where its first source runs out (each epoch "
                    "then starts every source anew); without it a source that runs out starts "
                    "its own next epoch"),
  };
}

// Sequence packing of token ids (docs/text.md).
Rows PackRows() {
  return {
      IntOption<O>("pack_length", "pack-length", &O::pack_length, 0, int64_t{1} << 24,
                   "pack the pipeline's token ids into rows of this many tokens, --batch rows a "
                   "batch, with position_ids, segment_ids and cu_seqlens (0: no packing)"),
      ChoiceOption<O>("pack_mode", "pack-mode", &O::pack_mode, ParsePackMode, PackModeName,
                      "greedy (concatenate and cut every --pack-length tokens) | best_fit (keep "
                      "documents whole where they fit, longest first into the fullest row)"),
      IntOption<O>("pack_window_tokens", "pack-window-tokens", &O::pack_window_tokens, 1,
                   int64_t{1} << 32,
                   "best_fit: tokens packed together (held in memory, 4 bytes each; more: less "
                   "padding)"),
      IntOption<O>("pack_pad_id", "pack-pad-id", &O::pack_pad_id, 0, kIntMax,
                   "the token id that pads a row"),
      NoKeyword(IntOption<O>("pack_skip_tokens", "start-pack-tokens", &O::pack_skip_tokens, 0,
                             kInt64Max,
                             "resume a packed run: tokens of the document at --start-sample "
                             "already packed (greedy)")),
      NoKeyword(IntOption<O>("pack_skip_rows", "start-pack-rows", &O::pack_skip_rows, 0, kInt64Max,
                             "resume a packed run: rows of the window at --start-sample already "
                             "delivered (best_fit)")),
  };
}

Rows RankRows() {
  return {
      IntOption<O>("rank", "rank", &O::rank, 0, kIntMax,
                   "this trainer's rank (samples are sharded across ranks)"),
      IntOption<O>("world_size", "world-size", &O::world_size, 1, kIntMax, "number of ranks"),
      StringOption<O>("job", "job", &O::job,
                      "the training job's name, the same on every rank, so that workers, the "
                      "scheduler and metrics see one job (default: $PREPFLOW_JOB, else torchrun's "
                      "run id, else a fresh one per process)"),
      IntOption<O>("local_ranks", "local-ranks", &O::local_ranks, 0, kIntMax,
                   "ranks of this job on this machine, sharing its CPUs (each plans with its "
                   "share; 0: $LOCAL_WORLD_SIZE, set by torchrun, else 1)"),
      ChoiceOption<O>("rank_split", "rank-split", &O::rank_split, ParseRankSplit, RankSplitName,
                      "when the dataset does not divide by --world-size: pad (every rank the "
                      "same samples and batches, repeating a few, as DistributedSampler), drop "
                      "(leave the rest out) or uneven (every sample once; ranks differ by one)"),
  };
}

// Where samples run: offloading, workers, the scheduler, the planner.
Rows OffloadRows() {
  return {
      OffloadOption(),
      DoubleOption<O>("demand", "demand", &O::demand, 0, kNoMax, false,
                      "samples/s the trainer consumes, for --offload auto and --echo auto (0: "
                      "measured; unlimited here)"),
      DoubleOptionVia<O>(
          "bandwidth_mbps", "bandwidth-mbps", [](const O& o) { return o.bandwidth * 8 / 1e6; },
          [](O& o, double mbps) { o.bandwidth = mbps * 1e6 / 8; }, 0, kNoMax, false,
          "network into this trainer machine in Mbit/s, for --offload auto (0: unlimited; ranks "
          "on one machine each count their share)"),
      CollectionOption<std::vector<std::string>>("workers", "workers", OptionKind::kList,
                                                 &O::workers,
                                                 "prepflow-worker addresses, host:port,..."),
      StringOption<O>("scheduler", "scheduler", &O::scheduler,
                      "prepflow-scheduler host:port: take workers from its grants (with or "
                      "instead of --workers)"),
      DoubleOption<O>("weight", "weight", &O::scheduler_weight, 0, kNoMax, true,
                      "this job's share weight at the scheduler"),
      CollectionOption<std::map<std::string, std::string>>(
          "labels", "labels", OptionKind::kMap, &O::labels,
          "locality for the scheduler, k=v,... (e.g. zone=a)"),
      DoubleOption<O>("max_remote_cores", "max-remote-cores", &O::max_remote_cores, 0, kNoMax,
                      false,
                      "most worker cores to ask the scheduler for (0: what the planner would use, "
                      "or the fair share)"),
      DoubleOption<O>("worker_timeout", "worker-timeout", &O::worker_timeout_seconds, 0, kNoMax,
                      true,
                      "seconds a worker may stay silent while it owes results before its work "
                      "moves"),
      DoubleOption<O>("hedge_after", "hedge-after", &O::hedge_after, 0, kNoMax, false,
                      "copy an item to an idle worker once it has waited this many times the "
                      "fastest worker's item latency; the first answer wins (0: never)"),
      IntOption<O>("item_samples", "item-samples", &O::item_samples, 1, kIntMax,
                   "samples per remote work item"),
      DoubleOption<O>("prefetch_seconds", "prefetch-seconds", &O::prefetch_seconds, 0, 60, false,
                      "with workers: batches prepared ahead also cover this many seconds of "
                      "delivery (at the rate so far; at most 32 batches, or --prefetch, and "
                      "256 MiB of them), so one side's pause does not idle the other (0: "
                      "--prefetch alone)"),
      BoolOption<O>("fallback_local", "fallback-local", &O::fallback_local,
                    "with --offload remote or cut=K: run locally (with a warning) when no worker "
                    "can be reached at the start, instead of failing"),
  };
}

// How the running placement is re-decided (--offload auto) and how long
// workers get to answer.
Rows TuningRows() {
  return {
      DoubleOption<O>("replan_seconds", "replan-seconds", &O::replan_seconds, 0, kNoMax, true,
                      "--offload auto: how often to re-plan"),
      DoubleOption<O>("replan_drift", "replan-drift", &O::replan_drift, 0, kNoMax, false,
                      "--offload auto: re-plan sooner when a measurement moves by this fraction"),
      DoubleOption<O>("replan_gain", "replan-gain", &O::replan_gain, 0, kNoMax, false,
                      "--offload auto: switch plans only for this fraction more throughput"),
      DoubleOption<O>("replan_link_wait_seconds", "replan-link-wait-seconds",
                      &O::replan_link_wait_seconds, 0, kNoMax, false,
                      "--offload auto without --bandwidth-mbps: how long the first plan may wait "
                      "for every worker's link to be measured"),
      DoubleOption<O>("replan_probe_share", "replan-probe-share", &O::replan_probe_share, 0, 1,
                      false,
                      "--offload auto: until the first plan, the workers take their cores' share "
                      "of samples, at most this share (0: all local until the first plan)"),
      DoubleOption<O>("replan_min_gain", "replan-min-gain", &O::replan_min_gain, 0, kNoMax, false,
                      "--offload auto: the fraction more throughput than all local a plan must "
                      "predict to offload at all"),
      DoubleOption<O>("replan_link_growth", "replan-link-growth", &O::replan_link_growth, 0, kNoMax,
                      false,
                      "--offload auto without --bandwidth-mbps: until a link is seen binding, plan "
                      "at most this many times the fastest ingest seen (0: no cap)"),
      IntOption<O>("link_probe_bytes", "link-probe-bytes", &O::link_probe_bytes, 0, kInt64Max,
                   "--offload auto: bytes each worker sends as its stream opens, timed to know "
                   "its link before the first item crosses it (0: none; a worker sends at most "
                   "its --max-probe-bytes)"),
      DoubleOption<O>("connect_timeout_seconds", "connect-timeout-seconds",
                      &O::connect_timeout_seconds, 0, kNoMax, true,
                      "seconds for the job to open on each worker"),
      IntOption<O>("max_items_per_worker", "max-items-per-worker", &O::max_items_per_worker, 0,
                   kIntMax, "work items in flight per worker, at most (0: the worker's choice)"),
  };
}

// Caches and data echoing.
Rows ReuseRows() {
  return {
      BoundaryOption("cache_at", "cache-at", &O::cache_at,
                     "the stage boundary whose values caches keep, here and on workers: K (after "
                     "stage K-1; 0: the read bytes) or auto (the last deterministic one before "
                     "the first random stage)"),
      EchoOption(),
      IntOption<O>("max_echo", "max-echo", &O::max_echo, 1, kMaxCopies - 1,
                   "--echo auto: the most copies a sample may yield per epoch"),
      NoKeyword(IntOption<O>("start_echo", "start-echo", &O::start_echo, 0, kMaxCopies - 1,
                             "--echo auto: the first epoch's factor (0: 1, nothing measured "
                             "yet); when resuming mid-epoch, the factor that epoch had (--json's "
                             "echo_factor)")),
      BoundaryOption("echo_at", "echo-at", &O::echo_at,
                     "the boundary copies share: K, or auto (the cache boundary, --cache-at)"),
      IntOption<O>("echo_window", "echo-window", &O::echo_window, 1, kInt64Max,
                   "copies are shuffled within blocks of this many samples, so they are not "
                   "adjacent"),
      IntOption<O>("echo_bytes", "echo-bytes", &O::echo_bytes, 0, kInt64Max,
                   "values held for their later copies, at most"),
  };
}

std::vector<OptionField<O>>* MakeTable() {
  auto* table = new Rows(DataRows());
  for (Rows part : {MixRows(), PackRows(), RankRows(), OffloadRows(), TuningRows()}) {
    table->insert(table->end(), part.begin(), part.end());
  }
  AppendLifted(
      table, SecurityOptionFields(/*server=*/false), [](auto& o) -> auto& { return o.security; });
  AppendLifted(
      table, StorageOptionFields(), [](auto& o) -> auto& { return o.storage; });
  AppendLifted(
      table, CacheOptionFields(), [](auto& o) -> auto& { return o.cache; });
  const Rows reuse = ReuseRows();
  table->insert(table->end(), reuse.begin(), reuse.end());
  return table;
}

}  // namespace

const std::vector<OptionField<LoaderOptions>>& LoaderOptionFields() {
  static const Rows* table = MakeTable();
  return *table;
}

std::string OptionName(const char* key, OptionSurface surface) {
  for (const OptionField<O>& row : LoaderOptionFields()) {
    if (std::string_view(row.key) == key) return row.NameOn(surface);
  }
  return key;
}

}  // namespace prepflow
