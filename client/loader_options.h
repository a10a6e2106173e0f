// What a Loader is built from: LoaderOptions, the offload modes, and their
// validation.
//
// Every option is a row of LoaderOptionFields() (client/loader_option_fields.cc;
// base/options.h): its flag, Python keyword, help, bounds and default, once.
// ResolveOptions() checks every option once, naming the option at fault as
// the surface that set it spells it (LoaderOptions::surface), and
// fills in what the environment supplies: PREPFLOW_OFFLOAD when no offload
// mode is given (how offloading is switched on per job without code
// changes), PREPFLOW_SCHEDULER when neither workers nor a scheduler are.
//
// Thread-safety: plain values and pure functions (ResolveOptions reads the
// environment).
#ifndef PREPFLOW_CLIENT_LOADER_OPTIONS_H_
#define PREPFLOW_CLIENT_LOADER_OPTIONS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/options.h"
#include "net/security.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/sequence_pack.h"
#include "pipeline/reuse/sample_cache.h"
#include "policy/replanner.h"
#include "proto/pipeline.pb.h"
#include "storage/options.h"

namespace prepflow {

// The most preparing threads and batches in flight a job may ask for: each
// thread and batch takes memory up front, and past these a run fails to
// start (or aborts) instead of being refused with the flag's name.
inline constexpr int kMaxThreads = 1024;
inline constexpr int kMaxBatch = 1 << 20;
inline constexpr int kMaxPrefetch = 256;
// The most batch memory --prefetch-seconds adds batches for.
inline constexpr double kPrefetchSecondsBytes = 256.0 * (1 << 20);

enum class OnError { kSkip, kFail };
// The Parse functions' errors quote the text and say what is expected;
// their callers add the option's name.
absl::StatusOr<OnError> ParseOnError(const std::string& name);
// "pad" | "drop" | "uneven" (pipeline/core/epoch_order.h's RankSplit).
absl::StatusOr<RankSplit> ParseRankSplit(const std::string& name);

// Where samples run. kOff: all local. kRemote: every sample's whole pipeline
// on workers. kCut: stages [0, cut) on workers for a `remote_fraction` of the
// samples (chosen per sample from the seed), the rest fully local. kAuto: the
// planner (policy/planner.h) decides from measurements and keeps re-deciding.
struct OffloadMode {
  enum Kind { kOff, kRemote, kCut, kAuto };
  Kind kind = kOff;
  int cut = 0;
  double remote_fraction = 1.0;
};
// Parses "off" | "auto" | "remote" | "cut=K[,remote_fraction=F]".
absl::StatusOr<OffloadMode> ParseOffload(const std::string& text);
std::string OffloadModeString(const OffloadMode& mode);

struct LoaderOptions {
  proto::DatasetSpec dataset;
  proto::PipelineSpec pipeline;
  int batch_size = 64;
  int threads = 0;  // 0: every CPU this process may use
  int epochs = 1;
  // Resuming: the run covers epochs [first_epoch, first_epoch + epochs), and
  // its first epoch starts after its first `skip_batches` batches (the same
  // order and batches as an uninterrupted run, so exactly the rest arrive).
  int first_epoch = 0;
  int64_t skip_batches = 0;
  // With skip_batches: where in the epoch's order the next batch starts
  // (Batch::end_position of the last batch seen; 0: at its planned start).
  // It differs from the plan when batches were filled past failed samples.
  int64_t skip_samples = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  // Batching by length (audio): each batch's samples x its longest within
  // this many seconds (0: batches of batch_size); lengths from the
  // manifest's durations, else from each file's header. Samples sorted by
  // length together: bucket_window.
  double max_batch_seconds = 0;
  int64_t bucket_window = 1000;
  // A mixture (dataset.mix, --mix): samples per mixture epoch (0: the sum
  // of the sources), and whether an epoch ends where its first source runs
  // out (else a source that runs out starts its own next epoch).
  int64_t mix_epoch_samples = 0;
  bool mix_stop_at_first_end = false;
  // Sequence packing (docs/text.md): the pipeline's token ids, packed into
  // rows of pack_length tokens, batch_size rows a batch (0: no packing);
  // best-fit packs windows of pack_window_tokens; padding is pack_pad_id.
  int64_t pack_length = 0;
  PackMode pack_mode = PackMode::kGreedy;
  int64_t pack_window_tokens = SequencePackOptions().window_tokens;
  int64_t pack_pad_id = 0;
  // Resuming a packed run (with skip_samples, the document's position): the
  // next row starts pack_skip_tokens into that document (greedy), or is row
  // pack_skip_rows of the window that starts there (best-fit).
  int64_t pack_skip_tokens = 0;
  int64_t pack_skip_rows = 0;
  int rank = 0;
  int world_size = 1;
  // The training job, named alike on every rank: workers serve its ranks as
  // one job and the scheduler shares the pool per job. Empty:
  // $PREPFLOW_JOB, else the launcher's (torchrun's run id and master), else
  // a fresh name per Loader (a job of its own).
  std::string job;
  // When the dataset does not divide by world_size: pad (every rank the same
  // number of samples and batches, as DistributedSampler), drop, or uneven.
  RankSplit rank_split = RankSplit::kPad;
  // Ranks of this job on this machine, which share its CPUs: each plans with
  // (and by default runs threads on) its share. 0: $LOCAL_WORLD_SIZE (set by
  // torchrun), else 1.
  int local_ranks = 0;
  int prefetch_batches = 2;  // raised as needed to keep remote workers busy
  // With workers: the batches ahead also cover this many seconds of delivery
  // (at the rate delivered so far; at most kPrefetchSecondsBytes of batches),
  // so a pause on one side (a worker's round trip, a CPU quota's throttled
  // slice) does not idle the other.
  double prefetch_seconds = 0.5;
  OnError on_error = OnError::kSkip;
  int64_t max_pixels = 64'000'000;
  int max_jpeg_scans = kDefaultMaxJpegScans;  // see DecodeOptions
  double max_audio_seconds = DecodeOptions().max_audio_seconds;
  int max_audio_channels = DecodeOptions().max_audio_channels;
  double max_video_seconds = DecodeOptions().max_video_seconds;
  int max_video_frames = DecodeOptions().max_video_frames;
  // Of resizing stages that name none (proto::Fidelity): exact gives
  // torchvision's bytes; fast decodes JPEGs at a scale when shrinking.
  proto::Fidelity fidelity = proto::FIDELITY_EXACT;

  // Unset: the PREPFLOW_OFFLOAD environment variable, else off. This is what
  // lets offloading be switched on per job without code changes.
  std::optional<OffloadMode> offload;
  std::vector<std::string> workers;  // host:port
  // prepflow-scheduler host:port: workers from its grants, renewed every
  // heartbeat. The job asks for what its planner would use (kAuto) or for
  // as much as its fair share (kRemote, kCut). Empty, with no `workers`
  // either: the PREPFLOW_SCHEDULER environment variable, if set.
  std::string scheduler;
  double scheduler_weight = 1;                // this job's share weight
  std::map<std::string, std::string> labels;  // locality preference, e.g. zone=a
  double max_remote_cores = 0;                // most cores to ask for; 0: no cap
  double demand = 0;                          // samples/s the trainer consumes; 0: measured
  double bandwidth = 0;  // bytes/s into this machine (its ranks share it), for kAuto; 0: unlimited
  double replan_seconds = 2;   // kAuto: how often to re-plan
  double replan_drift = 0.25;  // kAuto: re-plan sooner when a measurement moves this much
  double replan_gain = 0.03;   // kAuto: switch plans only for this much more throughput
  // kAuto without `bandwidth`: how long the first plan may wait for every
  // worker's link to be watched (policy::ReplanOptions::link_wait_seconds).
  double replan_link_wait_seconds = policy::kLinkWaitSeconds;
  // kAuto: the warm-up's share of samples on workers, at most; the gain an
  // offloading plan must predict over all local; how far past the fastest
  // ingest seen plans may go while no link binds (policy::ReplanOptions).
  double replan_probe_share = policy::kProbeShare;
  double replan_min_gain = policy::kMinGain;
  double replan_link_growth = policy::kLinkGrowth;
  // kAuto: bytes each worker is asked to send as its stream opens, timed to
  // know its link before the first item crosses it (0: none).
  int64_t link_probe_bytes = int64_t{1} << 20;
  double worker_timeout_seconds = 30;  // silence while owing results
  // Hedging: an item that has waited this many times the fastest worker's
  // item latency is copied to an idle worker; the first answer wins and the
  // other is dropped. 0: never.
  double hedge_after = 3;
  double connect_timeout_seconds = 10;  // for the job to open on each worker
  // kRemote and kCut with --workers: when no worker can be reached at the
  // start, run locally (with a warning) instead of failing. kAuto always may.
  bool fallback_local = false;
  int item_samples = 8;          // samples per work item
  int max_items_per_worker = 0;  // credits asked for; 0: the worker's choice
  // TLS to the workers and the scheduler, and the bearer token to send
  // (net/security.h: --tls-ca, --tls-cert/--tls-key for mutual TLS,
  // --auth-token-file). Files are read when the Loader is created.
  SecurityOptions security;
  // Reads of data named by URL: timeouts, retries and reads ahead
  // (storage/options.h); credentials come from the environment
  // (S3FromEnvironment).
  RemoteReadOptions storage;
  // A sample cache here (RAM, and optionally disk) for the values at
  // boundary `cache_at` of the pipeline (-1: Pipeline::CacheBoundary(), the
  // last deterministic one before the first random stage). Workers keep
  // theirs at the same boundary, in caches their own flags size.
  SampleCacheOptions cache;
  int cache_at = -1;
  // Data echoing: each sample loaded up to boundary `echo_at` (-1: the
  // cache boundary) yields `echo` copies per epoch, each with its own random
  // draws from there on, spread through the epoch by a shuffle within
  // blocks of `echo_window` samples. Values waiting for their copies are
  // held within `echo_bytes`.
  //
  // `echo_auto` (--echo auto; `echo` is then ignored): each epoch's factor
  // is chosen as its order is made, from 1 to `max_echo`: the planner's
  // smallest that meets the measured demand (policy::ChooseEcho), from what
  // the epochs before measured. The first epoch of a run, with nothing
  // measured yet, runs `start_echo` (0: 1, fresh samples only); resuming
  // mid-epoch, pass the factor that epoch had (stats' echo_factor).
  int echo = 1;
  bool echo_auto = false;
  int max_echo = 4;
  int start_echo = 0;
  int echo_at = -1;
  int64_t echo_window = 256;
  int64_t echo_bytes = int64_t{512} << 20;
  // Where batches' sample memory comes from (default: malloc); e.g.
  // page-locked memory for asynchronous GPU copies (client/gpu).
  HostAllocator batch_allocator;
  // Batches the trainer keeps while it asks for the next one (a GPU
  // normalizer's copies in flight): made up front with the others, so that
  // batch_allocator is not called mid-training.
  int held_batches = 0;
  // Who set these: errors name options as its spelling (flags for the
  // command line and C++ callers, keywords where the Python binding set it).
  OptionSurface surface = OptionSurface::kCommandLine;
};

// Every option of LoaderOptions as a row (base/options.h), in --help order.
// Not rows: the dataset's path and the pipeline (each surface takes them its
// own way), batch_allocator and held_batches (C++ only).
const std::vector<OptionField<LoaderOptions>>& LoaderOptionFields();
// The option with Python keyword `key` as `surface` spells it ("--batch" or
// "batch_size").
std::string OptionName(const char* key, OptionSurface surface);

// LoaderOptions after validation, with the environment applied: `offload` is
// set, and `scheduler` holds PREPFLOW_SCHEDULER where it applies; under a
// launcher such as torchrun, RANK and WORLD_SIZE give the rank of a job that
// names none (rank 0 of 1), LOCAL_WORLD_SIZE `local_ranks` when it is 0, and
// PREPFLOW_JOB or torchrun's TORCHELASTIC_RUN_ID, MASTER_ADDR and
// MASTER_PORT the job's name when it has none.
// Errors: InvalidArgument naming the flag (or environment variable) and the
// value at fault.
absl::StatusOr<LoaderOptions> ResolveOptions(const LoaderOptions& options);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_OPTIONS_H_
