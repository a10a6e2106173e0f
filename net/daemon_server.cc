#include "net/daemon_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace prepflow::daemon {

void RegisterServerFlags(cli::FlagSet& f, DaemonServerOptions* o) {
  f.String("listen", &o->listen, "address to listen on");
  f.Int("port", &o->port, "port (0: pick a free one; the bound port is printed and logged)");
  f.String("port-file", &o->port_file, "write the bound port to this file once listening");
  f.Int("metrics-port", &o->metrics_port,
        "serve Prometheus /metrics here (0: a free port; -1: off)");
  f.Double("idle-connection-seconds", &o->idle_connection_seconds,
           "close a connection that has carried no call for this long");
}

DaemonServer::DaemonServer(DaemonServerOptions options, Security security, MakeService make_service)
    : options_(std::move(options)),
      security_(std::move(security)),
      make_service_(std::move(make_service)) {}

DaemonServer::~DaemonServer() { Shutdown(0); }

std::string DaemonServer::address() const {
  return absl::StrCat(options_.listen, ":", bound_port_);
}

bool DaemonServer::Start() {
  if (Build(options_.port)) return true;
  spdlog::error("cannot listen on {}:{}", options_.listen, options_.port);
  return false;
}

bool DaemonServer::Build(int port) {
  // A service of its own per build: the old one may still hold calls.
  std::unique_ptr<grpc::Service> service = make_service_();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat(options_.listen, ":", port), ServerCredentials(security_),
                           &bound);
  builder.RegisterService(service.get());
  // gRPC sets SO_REUSEPORT by default: a second daemon on a port in use
  // would then start too, and clients would land on either at random.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (options_.max_receive_message_bytes > 0) {
    builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  }
  if (options_.unlimited_send) builder.SetMaxSendMessageSize(-1);
  if (options_.tolerate_pings) builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(options_.handshake_timeout_seconds * 1000));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(options_.idle_connection_seconds * 1000));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) return false;
  bound_port_ = bound;
  service_ = std::move(service);
  server_ = std::move(server);
  return true;
}

int DaemonServer::ServeUntilStopped(StopSignals& signals, const std::function<void()>& on_restart) {
  return daemon::ServeUntilStopped(
      signals, address(), [this] { Shutdown(1); }, [this] { return Build(bound_port_); },
      on_restart);
}

void DaemonServer::Shutdown(double seconds) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  server_->Wait();
  server_.reset();
}

}  // namespace prepflow::daemon
