// TLS, mutual TLS and bearer tokens (server/security.h): the pieces alone,
// then real workers and a real scheduler with a throwaway PKI
// (tests/testing/make_certs.sh), each refusing what it should and serving
// jobs exactly once when the client is configured right.
#include "net/security.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "client/loader.h"
#include "client/worker_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

TEST(Security, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3creT"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3cre"));
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(Security, CheckTokenWantsTheBearerToken) {
  std::multimap<grpc::string_ref, grpc::string_ref> metadata;
  EXPECT_TRUE(CheckToken(metadata, "").ok());  // no token configured: anything goes
  const absl::Status missing = CheckToken(metadata, "tok");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("--auth-token-file"));
  const std::string key = "authorization", right = "Bearer tok", wrong = "Bearer tok2",
                    bare = "tok";
  for (const std::string* value : {&right, &wrong, &bare}) {
    metadata.clear();
    metadata.emplace(key, *value);
    EXPECT_EQ(CheckToken(metadata, "tok").ok(), value == &right) << *value;
  }
}

TEST(Security, LoadSecurityNamesTheFlagAndTheFile) {
  TempDir dir;
  testing::WriteFile(dir.Join("not-pem"), {'h', 'i'});
  SecurityOptions o;
  o.tls_ca_file = dir.Join("missing.crt");
  EXPECT_THAT(LoadSecurity(o).status().message(), HasSubstr("--tls-ca " + dir.Join("missing.crt")));
  o.tls_ca_file = dir.Join("not-pem");
  EXPECT_THAT(LoadSecurity(o).status().message(), HasSubstr("not a PEM file"));
  o = SecurityOptions();
  o.tls_cert_file = dir.Join("not-pem");
  EXPECT_THAT(LoadSecurity(o).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  o = SecurityOptions();
  o.tls_client_ca_file = dir.Join("not-pem");
  EXPECT_FALSE(LoadSecurity(o).ok());
  testing::WriteFile(dir.Join("empty-token"), {' ', '\n'});
  o = SecurityOptions();
  o.auth_token_file = dir.Join("empty-token");
  EXPECT_THAT(LoadSecurity(o).status().message(), HasSubstr("--auth-token-file"));
}

TEST(Security, PlaintextOnlyOnLoopbackUnlessInsecure) {
  Security plain, tls;
  tls.cert = "pem";
  EXPECT_TRUE(CheckListenAddress("127.0.0.1", plain, false).ok());
  EXPECT_TRUE(CheckListenAddress("localhost", plain, false).ok());
  const absl::Status any = CheckListenAddress("0.0.0.0", plain, false);
  EXPECT_EQ(any.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(any.message(), HasSubstr("--insecure"));
  EXPECT_TRUE(CheckListenAddress("0.0.0.0", tls, false).ok());
  EXPECT_TRUE(CheckListenAddress("10.1.2.3", plain, true).ok());
}

class SecureCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string make =
        std::string(PREPFLOW_SOURCE_DIR) + "/tests/testing/make_certs.sh " + dir_->Join("pki");
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    testing::WriteRemoteTestSet(dir_->Join("root/data"));
    local_checksum_ = testing::Drain(Options("off", {})).stats.checksum;
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string Pki(const std::string& name) { return dir_->Join("pki/" + name); }

  static LoaderOptions Options(const std::string& mode, std::vector<std::string> workers) {
    LoaderOptions o;
    o.dataset.set_path(dir_->Join("root/data"));
    o.pipeline = *LoadPipelineSpec("imagenet-train");
    o.batch_size = 8;
    o.threads = 1;
    o.seed = 9;
    o.offload = *ParseOffload(mode);
    o.workers = std::move(workers);
    o.item_samples = 4;
    o.connect_timeout_seconds = 5;
    return o;
  }
  static testing::WorkerProcess Worker(std::vector<std::string> args) {
    args.insert(args.end(), {"--threads", "1"});
    return testing::WorkerProcess(dir_->Join("root"), args);
  }
  static void ExpectServed(const testing::Drained& r) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.stats.images, 96);
    EXPECT_EQ(r.stats.remote_images, 96);
    EXPECT_EQ(r.deliveries.size(), 96u);
    EXPECT_EQ(r.stats.checksum, local_checksum_);
  }
  // The worker cannot be reached (a failed handshake): the job runs here.
  // The job asked for remote work and no worker would serve it: it fails,
  // saying why, unless it may fall back to running locally.
  static void ExpectNotServed(LoaderOptions o) {
    auto refused = Loader::Create(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(refused.status().message(), HasSubstr("no worker is reachable"));
    o.fallback_local = true;
    const testing::Drained r = testing::Drain(o);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.stats.images, 96);
    EXPECT_EQ(r.stats.remote_images, 0);
    EXPECT_EQ(r.stats.workers_alive, 0);
    EXPECT_EQ(r.stats.checksum, local_checksum_);
  }

  static TempDir* dir_;
  static uint64_t local_checksum_;
};
TempDir* SecureCluster::dir_ = nullptr;
uint64_t SecureCluster::local_checksum_ = 0;

TEST_F(SecureCluster, TlsWorkerServesOnlyClientsThatTrustIt) {
  testing::WorkerProcess w =
      Worker({"--tls-cert", Pki("server.crt"), "--tls-key", Pki("server.key")});
  LoaderOptions o = Options("remote", {w.address()});
  o.security.tls_ca_file = Pki("ca.crt");
  ExpectServed(testing::Drain(o));

  o.security.tls_ca_file.clear();  // plaintext to a TLS server
  ExpectNotServed(o);
  o.security.tls_ca_file = Pki("rogue-ca.crt");  // does not trust its certificate
  ExpectNotServed(o);
}

TEST_F(SecureCluster, OneCertificateForAFleetWithTheServerNameOverride) {
  // The certificate names "prepflow-worker", not the address dialled.
  testing::WorkerProcess w =
      Worker({"--tls-cert", Pki("fleet.crt"), "--tls-key", Pki("fleet.key")});
  LoaderOptions o = Options("remote", {w.address()});
  o.security.tls_ca_file = Pki("ca.crt");
  ExpectNotServed(o);
  o.security.tls_server_name = "prepflow-worker";
  ExpectServed(testing::Drain(o));
}

TEST_F(SecureCluster, MutualTlsWantsAClientCertificate) {
  testing::WorkerProcess w = Worker({"--tls-cert", Pki("server.crt"), "--tls-key",
                                     Pki("server.key"), "--tls-client-ca", Pki("ca.crt")});
  LoaderOptions o = Options("remote", {w.address()});
  o.security.tls_ca_file = Pki("ca.crt");
  ExpectNotServed(o);                           // no client certificate
  o.security.tls_cert_file = Pki("rogue.crt");  // one the worker's CA did not sign
  o.security.tls_key_file = Pki("rogue.key");
  ExpectNotServed(o);
  o.security.tls_cert_file = Pki("client.crt");
  o.security.tls_key_file = Pki("client.key");
  ExpectServed(testing::Drain(o));
}

TEST_F(SecureCluster, TokenWorkerRefusesAMissingOrWrongToken) {
  testing::WorkerProcess w = Worker({"--auth-token-file", Pki("token")});
  LoaderOptions o = Options("remote", {w.address()});
  for (const std::string token : {"", "wrong-token"}) {
    o.security.auth_token_file = token.empty() ? "" : Pki(token);
    const absl::Status s = Loader::Create(o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << token << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("bearer token")) << token;
  }
  o.security.auth_token_file = Pki("token");
  ExpectServed(testing::Drain(o));
}

TEST_F(SecureCluster, AStreamThatNeverOpensAJobIsEnded) {
  // A client that connects and says nothing would otherwise hold one of the
  // worker's --max-streams slots for as long as it likes.
  testing::WorkerProcess w = Worker({"--open-timeout-seconds", "0.5"});
  auto stub =
      proto::Worker::NewStub(grpc::CreateChannel(w.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->Process(&context);
  proto::WorkerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));  // ends without a word from us
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--open-timeout-seconds"));
}

TEST_F(SecureCluster, DaemonsRefusePlaintextOnReachableAddresses) {
  for (const char* binary : {"prepflow-worker", "prepflow-scheduler"}) {
    auto started = prepflow::WorkerProcess::StartDaemon(
        std::string(PREPFLOW_BIN_DIR) + "/" + binary,
        {"--listen", "0.0.0.0", "--port", "0", "--data-root", dir_->Join("root")}, 10);
    ASSERT_FALSE(started.ok()) << binary;
    EXPECT_THAT(started.status().message(), HasSubstr("exit code 2")) << binary;
  }
  // --insecure on a trusted network, or TLS, is accepted.
  auto insecure = prepflow::WorkerProcess::StartDaemon(
      std::string(PREPFLOW_BIN_DIR) + "/prepflow-scheduler",
      {"--listen", "0.0.0.0", "--port", "0", "--insecure"}, 10);
  EXPECT_TRUE(insecure.ok()) << insecure.status();
}

TEST_F(SecureCluster, SchedulerWithTlsAndTokenGrantsOnlyAuthenticatedJobs) {
  auto scheduler = prepflow::WorkerProcess::StartDaemon(
      std::string(PREPFLOW_BIN_DIR) + "/prepflow-scheduler",
      {"--port", "0", "--heartbeat-seconds", "0.2", "--expire-after", "2", "--tls-cert",
       Pki("server.crt"), "--tls-key", Pki("server.key"), "--auth-token-file", Pki("token")});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string address = (*scheduler)->address();
  // The worker beats over TLS with the token, and serves with them too.
  testing::WorkerProcess w =
      Worker({"--scheduler", address, "--tls-ca", Pki("ca.crt"), "--auth-token-file", Pki("token"),
              "--tls-cert", Pki("server.crt"), "--tls-key", Pki("server.key")});
  LoaderOptions o = Options("remote", {});
  o.scheduler = address;
  o.security.tls_ca_file = Pki("ca.crt");
  o.security.auth_token_file = Pki("wrong-token");
  // No grant: a remote job stops, saying what the scheduler answered; with
  // --fallback-local it runs here until one comes.
  const auto unauthenticated = Loader::Create(o);
  EXPECT_TRUE(absl::IsUnavailable(unauthenticated.status())) << unauthenticated.status();
  EXPECT_THAT(unauthenticated.status().message(), HasSubstr("bearer token"));
  o.fallback_local = true;
  const testing::Drained refused = testing::Drain(o);
  ASSERT_TRUE(refused.status.ok()) << refused.status;
  EXPECT_EQ(refused.stats.remote_images, 0);
  EXPECT_EQ(refused.stats.checksum, local_checksum_);
  EXPECT_FALSE(refused.stats.scheduler_reachable);

  o.security.auth_token_file = Pki("token");
  o.connect_timeout_seconds = 30;
  // The worker may still be registering: wait for a run that had it from the
  // start (one that got it mid-run is partly local).
  testing::Drained served;
  for (int attempt = 0; attempt < 50 && served.stats.remote_images != 96; ++attempt) {
    served = testing::Drain(o);
  }
  ExpectServed(served);
  EXPECT_TRUE(served.stats.scheduler_reachable);
}

// Roles: jobs hold a job token and cannot register or repoint a worker;
// a worker's registration is bound to its lease and certificate, so another
// worker credential (here: a valid certificate of another name) cannot
// repoint it either; and the job verifies the granted worker presents the
// certificate it registered with.
TEST_F(SecureCluster, AJobCredentialCannotRegisterOrRepointAWorker) {
  auto scheduler = prepflow::WorkerProcess::StartDaemon(
      std::string(PREPFLOW_BIN_DIR) + "/prepflow-scheduler",
      {"--port", "0", "--heartbeat-seconds", "0.2", "--expire-after", "2", "--tls-cert",
       Pki("server.crt"), "--tls-key", Pki("server.key"), "--tls-client-ca", Pki("ca.crt"),
       "--worker-token-file", Pki("token"), "--job-token-file", Pki("wrong-token")});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string address = (*scheduler)->address();
  testing::WorkerProcess w =
      Worker({"--scheduler", address, "--worker-id", "w1", "--tls-ca", Pki("ca.crt"), "--tls-cert",
              Pki("server.crt"), "--tls-key", Pki("server.key"), "--tls-client-ca", Pki("ca.crt"),
              "--auth-token-file", Pki("wrong-token"), "--worker-token-file", Pki("token")});

  auto stub_as = [&](const std::string& cert, const std::string& token) {
    SecurityOptions so;
    so.tls_ca_file = Pki("ca.crt");
    so.tls_cert_file = Pki(cert + ".crt");
    so.tls_key_file = Pki(cert + ".key");
    so.auth_token_file = Pki(token);
    auto security = LoadSecurity(so);
    EXPECT_TRUE(security.ok()) << security.status();
    return std::make_pair(proto::Scheduler::NewStub(SecureChannel(address, *security)), *security);
  };
  // Wait until w1 has registered (a job sees it granted).
  auto [job_stub, job_security] = stub_as("client", "wrong-token");
  std::string granted_name;
  for (int i = 0; i < 200 && granted_name.empty(); ++i) {
    grpc::ClientContext context;
    AttachToken(&context, job_security);
    proto::JobBeat beat;
    beat.set_job_id("probe");
    beat.set_wanted_cores(1);
    proto::JobGrant grant;
    ASSERT_TRUE(job_stub->JobHeartbeat(&context, beat, &grant).ok());
    if (grant.workers_size() > 0) granted_name = grant.workers(0).tls_name();
    if (granted_name.empty()) usleep(50'000);
  }
  ASSERT_EQ(granted_name, "localhost") << "the identity of server.crt w1 registered with";

  proto::WorkerBeat hijack;
  hijack.set_worker_id("w1");
  hijack.set_address("127.0.0.1:9");
  hijack.set_cores(1);
  {
    grpc::ClientContext context;
    AttachToken(&context, job_security);
    proto::WorkerBeatReply reply;
    EXPECT_EQ(job_stub->WorkerHeartbeat(&context, hijack, &reply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << "a job token registered a worker";
  }
  {
    auto [worker_stub, worker_security] = stub_as("client", "token");
    grpc::ClientContext context;
    AttachToken(&context, worker_security);
    proto::WorkerBeatReply reply;
    const grpc::Status s = worker_stub->WorkerHeartbeat(&context, hijack, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  }

  LoaderOptions o = Options("remote", {});
  o.scheduler = address;
  o.security.tls_ca_file = Pki("ca.crt");
  o.security.tls_cert_file = Pki("client.crt");
  o.security.tls_key_file = Pki("client.key");
  o.security.auth_token_file = Pki("wrong-token");
  o.connect_timeout_seconds = 30;
  const testing::Drained served = testing::Drain(o);
  ExpectServed(served);
  ASSERT_EQ(served.stats.workers.size(), 1u);
  EXPECT_EQ(served.stats.workers[0].address, w.address()) << "the grant was repointed";
}

TEST(Security, SubjectHasRole) {
  EXPECT_TRUE(SubjectHasRole("CN=localhost,OU=prepflow-worker", kWorkerRole));
  EXPECT_TRUE(SubjectHasRole("OU=prepflow-job, CN=a trainer", kJobRole));
  EXPECT_FALSE(SubjectHasRole("CN=localhost,OU=prepflow-worker", kJobRole));
  EXPECT_FALSE(SubjectHasRole("CN=OU=prepflow-worker", kWorkerRole));
  EXPECT_FALSE(SubjectHasRole("CN=x\\,OU=prepflow-worker", kWorkerRole)) << "an escaped comma";
  EXPECT_FALSE(SubjectHasRole("OU=prepflow-workers", kWorkerRole));
  EXPECT_FALSE(SubjectHasRole("", kWorkerRole));
}

// With --cert-roles the role is in the certificate: a job's certificate
// (OU=prepflow-job) cannot register a worker even with the worker token, and
// a worker's cannot ask for workers; each role's own certificate can.
TEST_F(SecureCluster, CertificateRolesKeepJobsAndWorkersApart) {
  auto scheduler = prepflow::WorkerProcess::StartDaemon(
      std::string(PREPFLOW_BIN_DIR) + "/prepflow-scheduler",
      {"--port", "0", "--heartbeat-seconds", "0.2", "--expire-after", "2", "--tls-cert",
       Pki("server.crt"), "--tls-key", Pki("server.key"), "--tls-client-ca", Pki("ca.crt"),
       "--cert-roles", "--auth-token-file", Pki("token")});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string address = (*scheduler)->address();
  auto stub_as = [&](const std::string& cert) {
    SecurityOptions so;
    so.tls_ca_file = Pki("ca.crt");
    so.tls_cert_file = Pki(cert + ".crt");
    so.tls_key_file = Pki(cert + ".key");
    so.auth_token_file = Pki("token");
    auto security = LoadSecurity(so);
    EXPECT_TRUE(security.ok()) << security.status();
    return std::make_pair(proto::Scheduler::NewStub(SecureChannel(address, *security)), *security);
  };
  proto::WorkerBeat beat;
  beat.set_worker_id("w9");
  beat.set_address("127.0.0.1:9");
  beat.set_cores(1);
  proto::JobBeat want;
  want.set_job_id("j9");
  want.set_wanted_cores(1);
  auto worker_beat = [&](const std::string& cert) {
    auto [stub, security] = stub_as(cert);
    grpc::ClientContext context;
    AttachToken(&context, security);
    proto::WorkerBeatReply reply;
    return stub->WorkerHeartbeat(&context, beat, &reply);
  };
  auto job_beat = [&](const std::string& cert) {
    auto [stub, security] = stub_as(cert);
    grpc::ClientContext context;
    AttachToken(&context, security);
    proto::JobGrant grant;
    return stub->JobHeartbeat(&context, want, &grant);
  };
  const grpc::Status job_registers = worker_beat("job-role");
  EXPECT_EQ(job_registers.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(job_registers.error_message(), HasSubstr("OU=prepflow-worker (--cert-roles)"));
  EXPECT_EQ(job_beat("worker-role").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(worker_beat("client").error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << "a certificate with no role";
  EXPECT_TRUE(worker_beat("worker-role").ok());
  EXPECT_TRUE(job_beat("job-role").ok());
}

}  // namespace
}  // namespace prepflow
