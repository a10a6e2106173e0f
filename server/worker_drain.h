// prepflow-worker --drain: makes a running worker drain and leave, and waits
// until it has. For a Kubernetes preStop hook, a node's termination handler
// (a spot VM's notice) and scripts.
//
// The worker is told by SIGTERM, so only who may signal it can drain it (no
// network call to authenticate), and why by the signal's value. On SIGTERM
// it stops taking grants and items, answers what it holds, and exits once
// its jobs have closed their streams, at most its --grace-seconds later
// (docs/deploy.md). The worker is found by its --pid-file; without one,
// process 1 (a container's main process). Either must be a prepflow-worker:
// a stale pid file naming another program is refused, never signalled.
//
// Thread-safety: functions of the calling thread only.
#ifndef PREPFLOW_SERVER_WORKER_DRAIN_H_
#define PREPFLOW_SERVER_WORKER_DRAIN_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prepflow {

// The worker's process id: the number in `pid_file`, or process 1 when it is
// empty. NotFound: no such file or process; InvalidArgument: the file holds
// no process id, or the process is not a prepflow-worker (its name says
// which it is).
absl::StatusOr<pid_t> FindWorkerToDrain(const std::string& pid_file);

// Why a worker drains (--drain-reason), told to the scheduler with its beats:
//   stop       scale-down, maintenance, a deploy: the worker's class stays as
//              it is
//   reclaimed  its capacity is being taken back (a spot or preemptible VM's
//              notice): more of its class may follow, so the scheduler grants
//              the class's other workers last for a while (--reclaim-seconds)
// The drain command sends it as SIGTERM's sigqueue(3) value; a plain SIGTERM
// (kill, systemd, the kubelet) carries none, and the worker's own
// --drain-reason (default stop) stands for it.
enum class DrainReason { kUnsaid = 0, kStop = 1, kReclaimed = 2 };
// "" is kUnsaid; InvalidArgument names the flag and the values it takes.
absl::StatusOr<DrainReason> ParseDrainReason(const std::string& text);
const char* DrainReasonName(DrainReason reason);  // "stop", "reclaimed" ("" unsaid)
// The reason a SIGTERM's queued value carries (StopSignals::queued_value),
// `otherwise` when it carries none or one not known.
DrainReason DrainReasonOf(int queued_value, DrainReason otherwise);

// Sends `pid` SIGTERM (with `reason` as its value, unless kUnsaid) and waits
// up to `wait_seconds` for it to exit, logging every 5 s. DeadlineExceeded
// when it is still running then; PermissionDenied when this process may not
// signal it.
absl::Status DrainAndWait(pid_t pid, double wait_seconds, DrainReason reason);

// Writes this process's id to `path` (atomically: a rename), for --drain.
// False (logged) when it cannot.
bool WritePidFile(const std::string& path);
// Removes `path` if it still holds this process's id.
void RemovePidFile(const std::string& path);

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_WORKER_DRAIN_H_
