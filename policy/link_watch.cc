#include "policy/link_watch.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace prepflow::policy {
namespace {

// The share of `cores` that `cpu_seconds` kept busy over `seconds`.
double Busy(double cpu_seconds, double seconds, double cores) {
  return cpu_seconds / (seconds * std::max(cores, 0.01));
}

}  // namespace

void LinkWatch::Fold(const Snapshot& s, double receive_cost_per_byte,
                     std::vector<std::string>* notes) {
  receive_cost_ = receive_cost_per_byte;
  FoldLinks(s, notes);
  FoldIngest(s, notes);
}

void LinkWatch::Reopen() {
  for (auto& [id, lw] : links_) lw.start_nanos = 0;  // opens at the next snapshot
  ingest_.start_nanos = 0;
}

bool LinkWatch::Measured(const Snapshot& s) const {
  for (const WorkerTotals& w : s.workers) {
    if (!w.usable || w.results == 0) continue;
    auto it = links_.find(w.id);
    if (it == links_.end() || !it->second.measured) return false;
  }
  return true;
}

double LinkWatch::limit(int id) const {
  auto it = links_.find(id);
  return it != links_.end() ? it->second.link.limit : 0;
}

std::map<int, LinkEstimate> LinkWatch::links() const {
  std::map<int, LinkEstimate> out;
  for (const auto& [id, lw] : links_) out[id] = lw.link;
  return out;
}

void LinkWatch::FoldLinks(const Snapshot& s, std::vector<std::string>* notes) {
  // Each worker's window opens at its first answers and closes at the first
  // snapshot 1 s later with 4 results more: a link that binds from the start
  // is found about a second after the first results arrive.
  for (const WorkerTotals& w : s.workers) {
    if (!w.usable) continue;
    LinkWindow& lw = links_[w.id];
    if (w.probe.rate() > 0 && lw.link.probe == 0) SeedFromProbe(w, lw, notes);
    if (lw.start_nanos == 0) {  // opens at its first answers
      if (w.results > 0) {
        lw = LinkWindow{s.now_nanos, s.process_cpu_nanos, w, lw.link, lw.measured, lw.probed};
      }
      continue;
    }
    const double seconds = (s.now_nanos - lw.start_nanos) * 1e-9;
    const int64_t results = w.results - lw.start.results;
    if (seconds < 1 || results < 4) continue;
    const double rate = (w.received_bytes - lw.start.received_bytes) / seconds;
    const double here_busy =
        Busy((s.process_cpu_nanos - lw.start_cpu_nanos) * 1e-9, seconds, s.local_cores);
    LinkEstimate& link = lw.link;
    link.ingest_rate = rate;
    if (LinkBound(w, lw.start, seconds, rate, here_busy)) {
      if ((link.limit == 0 || lw.probed) && notes != nullptr) {
        notes->push_back(absl::StrFormat(
            "worker %s: its link binds at %.1f MB/s (every credit out, CPU %.0f%% busy with "
            "this job, %.0f%% in all)",
            w.name, rate / 1e6, 100 * Busy(w.cpu_seconds - lw.start.cpu_seconds, seconds, w.cores),
            100 * w.worker_busy));
      }
      // The first window's verdict replaces the probe's.
      link.limit = link.limit > 0 && !lw.probed ? 0.5 * (link.limit + rate) : rate;
    } else if (link.limit > 0 && rate > link.limit) {
      link.limit = rate;
    } else if (link.limit > 0 && Saturated(w, lw.start) < 0.5) {
      // Answers came back with credits to spare: nothing held them, so the
      // estimate may be low (e.g. taken while this process was throttled to
      // its CPU quota and slow to take results). Probe up, a tenth a
      // window; a real link soon binds again and pulls it back.
      link.limit *= 1.1;
    }
    lw = LinkWindow{s.now_nanos, s.process_cpu_nanos, w, link, true};
  }
}

void LinkWatch::SeedFromProbe(const WorkerTotals& w, LinkWindow& lw,
                              std::vector<std::string>* notes) {
  lw.link.probe = w.probe.rate();
  if (!w.probe.steady() || lw.link.limit > 0) return;
  lw.link.limit = lw.link.probe;
  lw.measured = lw.probed = true;
  if (notes != nullptr) {
    notes->push_back(absl::StrFormat(
        "worker %s: its link probe came steadily at %.1f MB/s, taken as its link's limit until "
        "a window measures it",
        w.name, lw.link.probe / 1e6));
  }
}

double LinkWatch::Saturated(const WorkerTotals& w, const WorkerTotals& start) {
  const int64_t results = w.results - start.results;
  return results <= 0 ? 0
                      : static_cast<double>(w.saturated_results - start.saturated_results) /
                            static_cast<double>(results);
}

bool LinkWatch::LinkBound(const WorkerTotals& w, const WorkerTotals& start, double seconds,
                          double rate, double here_busy) const {
  const int64_t results = w.results - start.results;
  if (results <= 0) return false;
  // A worker busy with other work (another rank's items, another job's)
  // holds this job's back by its CPU, not by its link.
  if (w.worker_busy >= 0.8) return false;
  const double busy = Busy(w.cpu_seconds - start.cpu_seconds, seconds, w.cores);
  const double saturated = Saturated(w, start);
  // A busy process could be slow to take results off the wire, but only if
  // taking them is real work: at the measured receive cost, a rate that
  // needs under a quarter of a core is not held back by a busy trainer.
  // (Requiring an idle trainer as well meant the link was never found in a
  // real run: with --offload auto the trainer runs its own share flat out.)
  const double receive_cores = rate * receive_cost_;
  // Nor is it the link where the link's probe carried over twice as much: a
  // process at its CPU quota takes answers only while it runs (with 0.5 s of
  // batches ahead, a 0.5-core trainer left every credit out on a bridge with
  // no limit, and the windows said 55-68 MB/s on links whose probes passed
  // GB/s). A link slower than its probe (a burst allowance) is found while
  // this process is idle.
  // A worker with no probe (one that joined mid-run: probes are timed only
  // while this process is idle) gives a busy process nothing to tell the
  // two apart, and no verdict is taken until this process idles (the
  // testbed's spot wave: a worker opened after a loss "bound" at 56 MB/s on
  // a bridge with no limit, and held the plan to that for the run).
  const bool probe_carried_more = !(w.probe.rate() > 0) || w.probe.rate() > 2 * rate;
  // With every credit out, the credits' time in the window is credits x
  // seconds; where the worker held the items for most of it (queued for
  // its threads, or running slowly: its CPU contended or starved, which its
  // own busy share does not show), the worker binds, not its link.
  const double held =
      w.credits > 0 ? (w.run_seconds - start.run_seconds) / (w.credits * seconds) : 0;
  return saturated >= 0.8 && busy < 0.6 && held < 0.5 &&
         (here_busy < 0.7 || (receive_cores < 0.25 && !probe_carried_more));
}

void LinkWatch::SeedIngestFromProbes(const Snapshot& s, std::vector<std::string>* notes) {
  if (ingest_.probes_seen) return;
  std::vector<const ProbeTimer*> probes;
  double fastest = 0;
  bool steady = true;
  for (const WorkerTotals& w : s.workers) {
    if (!w.usable) continue;
    if (!w.probe.done()) return;  // every one, or none
    probes.push_back(&w.probe);
    fastest = std::max(fastest, w.probe.rate());
    steady = steady && w.probe.steady();
  }
  if (probes.empty()) return;
  ingest_.probes_seen = true;
  const double together = TogetherRate(probes);
  if (probes.size() < 2 || !steady || !(together > 0) || fastest > 1.2 * together ||
      ingest_.limit > 0) {
    return;
  }
  ingest_.limit = together;
  ingest_.probed = true;
  if (notes != nullptr) {
    notes->push_back(absl::StrFormat(
        "the workers' link probes came at %.1f MB/s together, no faster than the fastest alone "
        "(%.1f MB/s): one link into this machine, taken as its limit until a window measures it",
        together / 1e6, fastest / 1e6));
  }
}

void LinkWatch::FoldIngest(const Snapshot& s, std::vector<std::string>* notes) {
  IngestWindow& iw = ingest_;
  SeedIngestFromProbes(s, notes);
  // A probe's rate passed on its link (the fastest: probes need not have
  // run at the same time).
  for (const WorkerTotals& w : s.workers) {
    if (w.usable) iw.peak = std::max(iw.peak, w.probe.rate());
  }
  auto open = [&] {
    iw.start_nanos = s.now_nanos;
    iw.start_cpu_nanos = s.process_cpu_nanos;
    iw.start.clear();
    for (const WorkerTotals& w : s.workers) {
      if (w.usable) iw.start[w.id] = w;
    }
  };
  if (iw.start_nanos == 0) {
    for (const WorkerTotals& w : s.workers) {
      if (w.usable && w.results > 0) return open();
    }
    return;
  }
  const double seconds = (s.now_nanos - iw.start_nanos) * 1e-9;
  int64_t results = 0, saturated = 0;
  double bytes = 0;
  for (const WorkerTotals& w : s.workers) {
    auto it = iw.start.find(w.id);
    if (!w.usable || it == iw.start.end()) continue;
    results += w.results - it->second.results;
    saturated += w.saturated_results - it->second.saturated_results;
    bytes += w.received_bytes - it->second.received_bytes;
  }
  // Slow start's base (see the rules): what passed with credits to spare
  // bounds the links from below from a quarter second on, before the window
  // closes and can say whether they bind.
  if (seconds >= 0.25 && results >= 2 && 2 * saturated < results) {
    iw.peak = std::max(iw.peak, bytes / seconds);
  }
  if (seconds < 1 || results < 4) return;
  const double rate = bytes / seconds;
  const double here_busy =
      Busy((s.process_cpu_nanos - iw.start_cpu_nanos) * 1e-9, seconds, s.local_cores);
  // Every usable worker answered, and every link bound.
  bool all_bound = !iw.start.empty();
  for (const WorkerTotals& w : s.workers) {
    if (!w.usable) continue;
    auto it = iw.start.find(w.id);
    all_bound =
        all_bound && it != iw.start.end() && LinkBound(w, it->second, seconds, rate, here_busy);
  }
  iw.peak = std::max(iw.peak, rate);
  if (all_bound) {  // the first window's verdict replaces the probes'
    iw.limit = iw.limit > 0 && !iw.probed ? 0.5 * (iw.limit + rate) : rate;
  } else if (iw.limit > 0 && rate > iw.limit) {
    iw.limit = rate;
  }
  iw.probed = false;
  open();  // the next window (the limit stays)
}

}  // namespace prepflow::policy
