// SampleRunner without workers: what it takes from a worker's answer.
#include "client/sample_runner.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "pipeline/data/synthetic.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;

class SampleRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticFolderOptions o;
    o.classes = 1;
    o.images_per_class = 4;
    ASSERT_TRUE(WriteSyntheticImageFolder(dir_.Join("d"), o).ok());
    proto::DatasetSpec spec;
    spec.set_path(dir_.Join("d"));
    dataset_ = *OpenDataset(spec);
    pipeline_ = *Pipeline::Create(*LoadPipelineSpec("imagenet-eval"), PipelineOptions());
    runner_ = std::make_unique<SampleRunner>(dataset_.get(), pipeline_.get(),
                                             SampleRunner::Sources{}, 1, 16, [] {});
    batch_ = std::make_unique<Batch>(pipeline_->output_type(), 4);
    const int64_t indices[] = {0, 1, 2, 3};
    batch_->Reset(0, 0, indices);
  }

  // A worker's answer for sample `slot` at the last cut, with the given
  // stage costs from `first_stage` on.
  void Answer(int64_t slot, int first_stage, int costs, bool cache_hit = false,
              double read_wait = 0, int64_t read_bytes = 0) {
    auto answer = std::make_shared<ReceivedMessage>();
    answer->message.mutable_result()->set_read_wait_seconds(read_wait);
    answer->message.mutable_result()->set_read_bytes(read_bytes);
    proto::SampleResult* r = answer->message.mutable_result()->add_samples();
    r->set_index(batch_->index_at(slot));
    r->set_first_stage(first_stage);
    r->set_cache_hit(cache_hit);
    r->set_read_cpu_seconds(0.001);
    for (int i = 0; i < costs; ++i) r->add_stages()->set_cpu_seconds(0.001);
    tensor_.assign(batch_->sample_bytes(), '\0');
    answer->payloads = {{absl::string_view(tensor_)}};
    runner_->TakeRemote(RemoteItem{batch_.get(), {slot}, pipeline_->num_stages()}, answer, "w");
  }
  int64_t RemoteSamples(int stage) const { return runner_->RemoteStages()[stage].samples; }

  TempDir dir_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<SampleRunner> runner_;
  std::unique_ptr<Batch> batch_;
  std::string tensor_;
};

TEST_F(SampleRunnerTest, AWorkersStageCostsCountOnlyWhereTheyNameStagesTheItemRan) {
  Answer(0, 0, 4);  // an honest answer: read and every stage
  EXPECT_EQ(RemoteSamples(0), 1);
  for (int k = 1; k <= 4; ++k) EXPECT_EQ(RemoteSamples(k), 1) << k;
  // More costs than the pipeline has stages (past the profiler's slots), or
  // a first stage out of range: taken as nothing, the sample as it is.
  Answer(1, 0, 50);
  Answer(2, -3, 2);
  for (int k = 0; k <= 4; ++k) EXPECT_EQ(RemoteSamples(k), 1) << k;
  // A cache hit at boundary 2: no read, and stages 2 and 3 only.
  Answer(3, 2, 2, /*cache_hit=*/true);
  EXPECT_EQ(RemoteSamples(0), 1);
  EXPECT_EQ(RemoteSamples(2), 1);
  EXPECT_EQ(RemoteSamples(3), 2);
  EXPECT_EQ(RemoteSamples(4), 2);
  EXPECT_TRUE(batch_->complete());
}

// What a worker says its reads waited and read feeds the planner's storage
// terms: taken when plausible, and a lie (negative, NaN, infinite, more
// than a minute or more bytes than the dataset admits per sample) is not.
TEST_F(SampleRunnerTest, AWorkersReadReportCountsOnlyWhenPlausible) {
  auto measured = [&] {
    policy::Snapshot s;
    runner_->Measure(&s);
    return std::make_pair(s.remote_read_wait_seconds, s.remote_read_bytes);
  };
  Answer(0, 0, 4, false, 0.25, 30000);
  EXPECT_EQ(measured(), std::make_pair(0.25, 30000.0));
  Answer(1, 0, 4, false, -1, 100);
  Answer(2, 0, 4, false, std::nan(""), 100);
  Answer(3, 0, 4, false, std::numeric_limits<double>::infinity(), 100);
  EXPECT_EQ(measured(), std::make_pair(0.25, 30000.0));
  batch_->Reset(0, 0, std::vector<int64_t>{0, 1, 2, 3});
  Answer(0, 0, 4, false, 61, 100);
  Answer(1, 0, 4, false, 0.1, -5);
  Answer(2, 0, 4, false, 0.1, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(measured(), std::make_pair(0.25, 30000.0));
}

}  // namespace
}  // namespace prepflow
