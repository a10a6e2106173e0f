// The worker's /metrics: real counters after real items, served over HTTP.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/synthetic.h"
#include "prometheus/exposer.h"
#include "server/worker_core.h"
#include "storage/metrics.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// GET http://127.0.0.1:port/metrics with a plain socket.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  return response;
}

TEST(WorkerMetrics, CountItemsSamplesErrorsAndStageTimes) {
  testing::TempDir dir;
  SyntheticFolderOptions o;
  o.classes = 1;
  o.images_per_class = 2;
  ASSERT_TRUE(WriteSyntheticImageFolder(dir.Join("data"), o).ok());
  testing::WriteFile(dir.Join("data/class000/zz-bad.jpg"), {0xFF, 0xD8, 0xFF, 1, 2, 3});

  WorkerMetrics metrics;
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(metrics.registry());
  const int port = exposer.GetListeningPorts().front();
  ASSERT_GT(port, 0);

  WorkerOptions options;
  options.data_root = dir.path();
  options.threads = 1;
  SampleCacheOptions cache;
  cache.ram_bytes = 1 << 20;
  options.cache = *SampleCache::Open(cache);
  // The exposer keeps a weak reference: the collector lives as long as the test.
  const auto collector = std::make_shared<CacheCollector>(options.cache, "prepflow_worker");
  exposer.RegisterCollectable(collector);
  WorkerCore core(options, &metrics);
  proto::JobOpen open;
  open.mutable_dataset()->set_path(dir.Join("data"));
  *open.mutable_pipeline() = *LoadPipelineSpec("imagenet-eval");
  proto::DatasetSpec spec;
  spec.set_path(dir.Join("data"));
  auto ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok());
  open.set_dataset_size((*ds)->size());
  open.set_dataset_fingerprint((*ds)->fingerprint());
  proto::JobOpened opened;
  auto job = core.OpenJob(open, "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();

  proto::WorkItem item;
  item.set_cut(4);
  for (int64_t i = 0; i < 3; ++i) item.add_indices(i);
  absl::Notification done;
  ASSERT_TRUE(core.Submit(*job, item, [&](ItemOutput) { done.Notify(); }).ok());
  done.WaitForNotification();

  const std::string text = Scrape(port);
  EXPECT_THAT(text, HasSubstr("200 OK"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_items_total 1\\b"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_samples_total 3\\b"));
  EXPECT_THAT(text,
              ContainsRegex("prepflow_worker_sample_errors_total\\{code=\"data_loss\"\\} 1\\b"));
  EXPECT_THAT(text,
              ContainsRegex("prepflow_worker_stage_seconds_count\\{stage=\"decode\"\\} 3\\b"));
  EXPECT_THAT(text,
              ContainsRegex("prepflow_worker_stage_seconds_count\\{stage=\"normalize\"\\} 2\\b"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_active_streams 1\\b"));
  EXPECT_THAT(text,
              ContainsRegex("prepflow_worker_sent_bytes_total 1204224\\b"));  // 2 x 3x224x224x4
  // imagenet-eval is cached at its output by default: three misses (the
  // bad file's too), and of the two good tensors (602 KB each) 1 MiB keeps
  // one, the higher-ranked, whichever came first.
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_cache_misses_total 3\\b"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_cache_bytes\\{tier=\"ram\"\\} 602125\\b"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_cache_entries\\{tier=\"ram\"\\} 1\\b"));
  EXPECT_THAT(text, ContainsRegex("prepflow_worker_cache_entries\\{tier=\"disk\"\\} 0\\b"));
  core.CloseJob(*job, "client-a");
  EXPECT_THAT(Scrape(port), ContainsRegex("prepflow_worker_active_streams 0\\b"));
}

}  // namespace
}  // namespace prepflow
