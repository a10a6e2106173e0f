// TLS and bearer tokens for prepflow's gRPC endpoints (worker, scheduler)
// and their clients (trainers, and workers beating to the scheduler).
//
// One set of flags everywhere (see docs/security.md):
//   --tls-cert, --tls-key    this process's certificate chain and key (PEM):
//                            a server presents it; a client presents it for
//                            mutual TLS
//   --tls-ca                 client: the CA that signed the servers; with it
//                            every connection is TLS and verified
//   --tls-server-name        client: the name to verify in servers'
//                            certificates instead of the dialled host (one
//                            certificate for a fleet reached by IP)
//   --tls-client-ca          server: require client certificates signed by
//                            this CA (mutual TLS)
//   --auth-token-file        a bearer token: servers require it on every call
//                            (UNAUTHENTICATED otherwise; compared in constant
//                            time), clients send it
//   --insecure               server: allow plaintext on a non-loopback address
//
// Thread-safety: everything here is a pure function of its arguments.
#ifndef PREPFLOW_NET_SECURITY_H_
#define PREPFLOW_NET_SECURITY_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/flags.h"
#include "base/options.h"
#include "grpcpp/grpcpp.h"

namespace prepflow {

// File names, as given on the command line (or in LoaderOptions).
struct SecurityOptions {
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  std::string tls_client_ca_file;
  std::string tls_server_name;
  std::string auth_token_file;
  // Role tokens (RegisterRoleTokenFlags): on the scheduler, what workers
  // (registering) and jobs must present, each defaulting to auth_token_file;
  // on a worker, worker_token_file is what it presents to the scheduler.
  std::string worker_token_file;
  std::string job_token_file;
  bool insecure = false;
};

// What those files hold.
struct Security {
  std::string cert, key, ca, client_ca, token;
  std::string worker_token, job_token;  // each defaults to `token`
  std::string server_name;              // verify servers as this name ("": the dialled host)
  bool server_tls() const { return !cert.empty(); }
  bool client_tls() const { return !ca.empty(); }
};

// The options above as rows (base/options.h): a client's (TLS to the servers
// it dials, its token), or with `server` also tls_client_ca and insecure.
const std::vector<OptionField<SecurityOptions>>& SecurityOptionFields(bool server);
// One flag per row of SecurityOptionFields(server).
void RegisterSecurityFlags(cli::FlagSet& flags, SecurityOptions* options, bool server);

// The role flags: --worker-token-file on a worker (`scheduler` false) and the
// scheduler, --job-token-file on the scheduler.
void RegisterRoleTokenFlags(cli::FlagSet& flags, SecurityOptions* options, bool scheduler);

// Reads the files. Errors: InvalidArgument naming the flag and the file (unreadable,
// empty, not PEM), or a certificate without its key and vice versa.
// `surface`: how errors name the options (--tls-ca, or tls_ca from Python).
absl::StatusOr<Security> LoadSecurity(const SecurityOptions& options,
                                      OptionSurface surface = OptionSurface::kCommandLine);

// TLS when the security has a certificate, else plaintext.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Security& security);
// TLS when the security has a CA (with this side's certificate for mutual TLS), else plaintext.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const Security& security);
// Channel arguments the security needs (the server-name override).
void ApplyChannelArguments(const Security& security, grpc::ChannelArguments* args);
// A channel to `target` with both.
std::shared_ptr<grpc::Channel> SecureChannel(const std::string& target, const Security& security);

// For a daemon: LoadSecurity, then CheckListenAddress for `listen`.
absl::StatusOr<Security> LoadServerSecurity(const SecurityOptions& options,
                                            const std::string& listen);

// Refuses plaintext on an address other hosts can reach unless `insecure`.
// Error: InvalidArgument naming --tls-cert and --insecure.
absl::Status CheckListenAddress(const std::string& listen, const Security& security, bool insecure);

// The token's metadata on a client call (nothing when there is no token).
void AttachToken(grpc::ClientContext* context, const Security& security);
// The peer's certificate name (first subject alternative name, else common
// name) when it presented a verified client certificate; else "".
std::string PeerIdentity(const grpc::ServerContextBase& context);

// With mutual TLS, roles can be carried in certificates as an organizational
// unit: OU=prepflow-worker for workers, OU=prepflow-job for jobs.
inline constexpr char kWorkerRole[] = "prepflow-worker";
inline constexpr char kJobRole[] = "prepflow-job";
// The peer certificate's subject ("CN=…,OU=…", RFC 2253), or "" without one.
std::string PeerSubject(const grpc::ServerContextBase& context);
// Whether `subject` has an OU equal to `role`.
bool SubjectHasRole(std::string_view subject, std::string_view role);

// OK when `token` is empty or the call carries "authorization: Bearer <token>";
// else UNAUTHENTICATED.
absl::Status CheckToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                        const std::string& token);
// Equal contents, in time that depends only on the lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace prepflow

#endif  // PREPFLOW_NET_SECURITY_H_
