// The trainer side's datasets: local paths as they are, and URLs (http://,
// https://, s3://) read through a store made from this process's
// environment (S3 credentials, region and endpoint: S3FromEnvironment).
//
// Thread-safety: pure functions; the datasets they open are as dataset.h
// says (every method concurrent after Open).
#ifndef PREPFLOW_CLIENT_DATASETS_H_
#define PREPFLOW_CLIENT_DATASETS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pipeline/data/dataset.h"
#include "proto/pipeline.pb.h"
#include "storage/options.h"

namespace prepflow {

// Whether `spec` reads any of its data through a URL (a remote store).
bool ReadsUrls(const proto::DatasetSpec& spec);
// OpenDataset with a store for URLs, reading as `remote` says; errors name
// the dataset, or the AWS variable that is wrong.
absl::StatusOr<std::unique_ptr<Dataset>> OpenClientDataset(const proto::DatasetSpec& spec,
                                                           const RemoteReadOptions& remote);

// How ops open their data on the trainer (PipelineOptions::open_data):
// OpenClientDataset of each path, format auto.
OpDataOpener ClientOpDataOpener(const RemoteReadOptions& remote);
// How ops read one file on the trainer (PipelineOptions::read_file): local
// paths, and URLs as `remote` reads them.
OpFileReader ClientOpFileReader(const RemoteReadOptions& remote);

// A local path as workers see it on shared storage: its real path, or made
// absolute as written where it names no file (a shard pattern); URLs as
// they are.
std::string SharedPath(const std::string& path);

// When `spec` names a materialized dataset (a materialized.pbtxt beside its
// shards: in the folder or prefix, or in the folder of its shard or pattern),
// sets spec->materialized from it. Errors: DataLoss for a manifest that does
// not parse, naming it; a manifest that cannot be read for another reason
// than its absence.
absl::Status FindMaterialized(proto::DatasetSpec* spec, const RemoteReadOptions& remote);

// Where `prepflow pack --out s3://bucket/prefix` writes. The prefix must
// hold nothing (FailedPrecondition naming it and --overwrite), unless
// `overwrite`: then its .tar and .tar.idx objects are deleted first. Returns
// what PackOptions::finished should do with each finished file: upload it
// below the prefix, then remove the local copy. Credentials as for reading.
absl::StatusOr<std::function<absl::Status(const std::string& path)>> RemotePackOutput(
    const std::string& url, bool overwrite);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_DATASETS_H_
