#include "net/security.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/flags.h"

namespace prepflow {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

// A token, certificate chain or key is small: a file past this (a device
// such as /dev/zero, a wrong path) is refused, not read until memory runs out.
constexpr size_t kMaxFlagFileBytes = size_t{1} << 20;

// `name`: the option as its surface spells it (--tls-ca, tls_ca).
absl::StatusOr<std::string> ReadFlagFile(const std::string& name, const std::string& path,
                                         bool pem) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", path, ": cannot read it: ", std::strerror(errno)));
  }
  std::string s(kMaxFlagFileBytes + 1, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  if (s.size() > kMaxFlagFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", path, ": over ", kMaxFlagFileBytes, " bytes; not a key file"));
  }
  if (pem && !absl::StrContains(s, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(name, " ", path, ": not a PEM file"));
  }
  if (!pem) s = std::string(absl::StripAsciiWhitespace(s));
  if (s.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " ", path, ": empty"));
  return s;
}

}  // namespace

namespace {

std::vector<OptionField<SecurityOptions>>* MakeSecurityFields(bool server) {
  using O = SecurityOptions;
  auto* rows = new std::vector<OptionField<O>>{
      StringOption<O>("tls_cert", "tls-cert", &O::tls_cert_file,
                      server ? "TLS certificate chain (PEM) to serve with; with --tls-key"
                             : "TLS client certificate (PEM) for mutual TLS; with --tls-key"),
      StringOption<O>("tls_key", "tls-key", &O::tls_key_file, "private key (PEM) of --tls-cert"),
      StringOption<O>(
          "tls_ca", "tls-ca", &O::tls_ca_file,
          "CA (PEM) that signed the servers this process dials; makes those connections TLS"),
      StringOption<O>("tls_server_name", "tls-server-name", &O::tls_server_name,
                      "with --tls-ca: the name servers' certificates must carry, instead of the "
                      "host dialled (one certificate for workers reached by IP)"),
  };
  if (server) {
    rows->push_back(
        StringOption<O>("tls_client_ca", "tls-client-ca", &O::tls_client_ca_file,
                        "require client certificates signed by this CA (PEM): mutual TLS"));
    rows->push_back(BoolOption<O>(
        "insecure", "insecure", &O::insecure,
        "allow plaintext gRPC on an address other hosts can reach (default: refuse)"));
  }
  rows->push_back(StringOption<O>("auth_token_file", "auth-token-file", &O::auth_token_file,
                                  server ? "bearer token every call must carry (and this process "
                                           "sends)"
                                         : "bearer token to send with every call"));
  return rows;
}

}  // namespace

const std::vector<OptionField<SecurityOptions>>& SecurityOptionFields(bool server) {
  static const auto* client_rows = MakeSecurityFields(false);
  static const auto* server_rows = MakeSecurityFields(true);
  return server ? *server_rows : *client_rows;
}

void RegisterSecurityFlags(cli::FlagSet& flags, SecurityOptions* o, bool server) {
  RegisterOptionFlags(flags, SecurityOptionFields(server), o);
}

void RegisterRoleTokenFlags(cli::FlagSet& flags, SecurityOptions* o, bool scheduler) {
  if (scheduler) {
    flags.String("worker-token-file", &o->worker_token_file,
                 "bearer token workers must present to register (default: --auth-token-file's); "
                 "give it and --job-token-file so that no job can register a worker");
    flags.String("job-token-file", &o->job_token_file,
                 "bearer token jobs must present (default: --auth-token-file's)");
  } else {
    flags.String("worker-token-file", &o->worker_token_file,
                 "bearer token to register with the scheduler (default: --auth-token-file's)");
  }
}

absl::StatusOr<Security> LoadSecurity(const SecurityOptions& o, OptionSurface surface) {
  // An option as `surface` spells it: --tls-ca, or tls_ca.
  const auto name = [surface](std::string flag) {
    if (surface == OptionSurface::kCommandLine) return "--" + flag;
    std::replace(flag.begin(), flag.end(), '-', '_');
    return flag;
  };
  Security s;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name("tls-cert"), " and ", name("tls-key"),
                                                   " go together: give both or neither"));
  }
  struct File {
    const char* flag;
    const std::string& path;
    std::string* into;
    bool pem;
  };
  for (const File& f :
       {File{"tls-cert", o.tls_cert_file, &s.cert, true},
        File{"tls-key", o.tls_key_file, &s.key, true}, File{"tls-ca", o.tls_ca_file, &s.ca, true},
        File{"tls-client-ca", o.tls_client_ca_file, &s.client_ca, true},
        File{"auth-token-file", o.auth_token_file, &s.token, false},
        File{"worker-token-file", o.worker_token_file, &s.worker_token, false},
        File{"job-token-file", o.job_token_file, &s.job_token, false}}) {
    if (f.path.empty()) continue;
    auto text = ReadFlagFile(name(f.flag), f.path, f.pem);
    if (!text.ok()) return text.status();
    *f.into = *std::move(text);
  }
  if (s.worker_token.empty()) s.worker_token = s.token;
  if (s.job_token.empty()) s.job_token = s.token;
  s.server_name = o.tls_server_name;
  if (!s.server_name.empty() && s.ca.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name("tls-server-name"), " needs ", name("tls-ca")));
  }
  if (!s.client_ca.empty() && s.cert.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name("tls-client-ca"), " needs ",
                                                   name("tls-cert"), " and ", name("tls-key"),
                                                   " (TLS first)"));
  }
  return s;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Security& s) {
  if (!s.server_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      s.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = s.client_ca;
  options.pem_key_cert_pairs.push_back({s.key, s.cert});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const Security& s) {
  if (!s.client_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = s.ca;
  options.pem_private_key = s.key;
  options.pem_cert_chain = s.cert;
  return grpc::SslCredentials(options);
}

absl::StatusOr<Security> LoadServerSecurity(const SecurityOptions& options,
                                            const std::string& listen) {
  auto security = LoadSecurity(options);
  if (!security.ok()) return security.status();
  if (absl::Status s = CheckListenAddress(listen, *security, options.insecure); !s.ok()) return s;
  return security;
}

void ApplyChannelArguments(const Security& s, grpc::ChannelArguments* args) {
  if (!s.server_name.empty()) args->SetSslTargetNameOverride(s.server_name);
}

std::shared_ptr<grpc::Channel> SecureChannel(const std::string& target, const Security& s) {
  grpc::ChannelArguments args;
  ApplyChannelArguments(s, &args);
  return grpc::CreateCustomChannel(target, ChannelCredentials(s), args);
}

absl::Status CheckListenAddress(const std::string& listen, const Security& s, bool insecure) {
  const bool loopback = listen == "localhost" || listen == "::1" || listen == "[::1]" ||
                        absl::StartsWith(listen, "127.");
  if (loopback || s.server_tls() || insecure) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--listen ", listen,
      ": refusing plaintext gRPC on an address other hosts can reach; give --tls-cert and "
      "--tls-key, or --insecure on a trusted network"));
}

void AttachToken(grpc::ClientContext* context, const Security& s) {
  if (!s.token.empty()) context->AddMetadata(kAuthorization, absl::StrCat(kBearer, s.token));
}

absl::Status CheckToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                        const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  auto it = metadata.find(kAuthorization);
  if (it != metadata.end()) {
    const std::string_view value(it->second.data(), it->second.size());
    if (value.rfind(kBearer, 0) == 0 &&
        ConstantTimeEquals(value.substr(sizeof(kBearer) - 1), token)) {
      return absl::OkStatus();
    }
  }
  return absl::UnauthenticatedError("missing or wrong bearer token (--auth-token-file)");
}

std::string PeerIdentity(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  const std::vector<grpc::string_ref> names = auth->GetPeerIdentity();
  if (names.empty()) return "";
  return std::string(names[0].data(), names[0].size());
}

std::string PeerSubject(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  const std::vector<grpc::string_ref> subject = auth->FindPropertyValues("x509_subject");
  return subject.empty() ? "" : std::string(subject[0].data(), subject[0].size());
}

bool SubjectHasRole(std::string_view subject, std::string_view role) {
  // RDNs are separated by commas; a comma inside a value is escaped ("\,").
  size_t start = 0;
  for (size_t i = 0; i <= subject.size(); ++i) {
    if (i < subject.size() && subject[i] == '\\') {
      ++i;
      continue;
    }
    if (i < subject.size() && subject[i] != ',') continue;
    std::string_view rdn = subject.substr(start, i - start);
    while (!rdn.empty() && rdn.front() == ' ') rdn.remove_prefix(1);
    if (rdn.size() == role.size() + 3 && rdn.substr(0, 3) == "OU=" && rdn.substr(3) == role) {
      return true;
    }
    start = i + 1;
  }
  return false;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer is read whatever matches, so the time says
  // nothing about where the first difference is.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace prepflow
