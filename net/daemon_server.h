// The gRPC server of a prepflow daemon: one port, hardened channel settings,
// and rebuilt in place when its listener dies.
//
// gRPC 1.51 stops accepting for good once accept4 fails (a flood of
// connections past the open-files limit) while the process stays up.
// ServeUntilStopped() watches for that (daemon.h: ListenerFailed) and shuts
// the server down, which closes every one of its connections, the flood's
// too, then builds it again on the same port with a fresh service from
// `make_service`. Both prepflow-worker and prepflow-scheduler run on it.
//
// Thread-safety: one thread drives it (the daemon's main); the services run
// on gRPC's threads.
#ifndef PREPFLOW_NET_DAEMON_SERVER_H_
#define PREPFLOW_NET_DAEMON_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "base/flags.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/service_type.h"
#include "net/daemon.h"
#include "net/security.h"

namespace prepflow::daemon {

struct DaemonServerOptions {
  std::string listen = "127.0.0.1";
  int port = 0;  // 0: a free one
  // Connections that never finish their handshake, or carry no call, are
  // closed: idle connections cannot pile up to the open-files limit.
  double handshake_timeout_seconds = 10;
  double idle_connection_seconds = 300;
  int max_receive_message_bytes = 0;  // 0: gRPC's default
  bool unlimited_send = false;
  // Clients' flow-control (BDP) pings arrive while a busy server has sent
  // nothing; gRPC's default policy would answer them with GOAWAY
  // (too_many_pings) and end every stream on the connection.
  bool tolerate_pings = false;
  std::string port_file;  // the bound port is written here once listening
  int metrics_port = -1;  // Prometheus /metrics (0: a free port; -1: off)
};

// The flags every daemon takes for the above: --listen, --port, --port-file,
// --metrics-port, --idle-connection-seconds.
void RegisterServerFlags(cli::FlagSet& flags, DaemonServerOptions* options);

class DaemonServer {
 public:
  using MakeService = std::function<std::unique_ptr<grpc::Service>()>;

  DaemonServer(DaemonServerOptions options, Security security, MakeService make_service);
  ~DaemonServer();

  // Binds and starts; false (logged) when it cannot listen.
  bool Start();
  // The bound port, once started.
  int port() const { return bound_port_; }
  std::string address() const;
  // The service of the server now running (null before Start()).
  grpc::Service* service() const { return service_.get(); }
  // Until SIGTERM or SIGINT (returned), rebuilding the server whenever its
  // listener dies; `on_restart` runs first each time (e.g. a counter).
  int ServeUntilStopped(StopSignals& signals, const std::function<void()>& on_restart);
  // Shuts the server down, letting calls finish for up to `seconds`.
  void Shutdown(double seconds);

 private:
  bool Build(int port);

  const DaemonServerOptions options_;
  const Security security_;
  const MakeService make_service_;
  int bound_port_ = 0;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace prepflow::daemon

#endif  // PREPFLOW_NET_DAEMON_SERVER_H_
