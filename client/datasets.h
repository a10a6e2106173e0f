// The trainer side's datasets: local paths as they are, and URLs (http://,
// https://, s3://) read through a store made from this process's
// environment (S3 credentials, region and endpoint: S3FromEnvironment).
#ifndef PREPFLOW_CLIENT_DATASETS_H_
#define PREPFLOW_CLIENT_DATASETS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "pipeline/dataset.h"
#include "proto/pipeline.pb.h"
#include "storage/flags.h"

namespace prepflow {

// OpenDataset with a store for URLs, reading as `remote` says; errors name
// the dataset, or the AWS variable that is wrong.
absl::StatusOr<std::unique_ptr<Dataset>> OpenClientDataset(const proto::DatasetSpec& spec,
                                                           const RemoteReadOptions& remote);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_DATASETS_H_
