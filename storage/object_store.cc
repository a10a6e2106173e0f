#include "storage/object_store.h"

#include <curl/curl.h>
#include <expat.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/text.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// `status` naming `url` too when it was fetched from another (an s3:// URL,
// fetched from its endpoint).
absl::Status Naming(const std::string& url, const std::string& fetched, absl::Status status) {
  if (status.ok() || url == fetched) return status;
  return absl::Status(status.code(), absl::StrCat(RedactedUrl(url), ": ", status.message()));
}

// An object key or listing prefix in a URL: unreserved characters and '/'
// as they are, every other byte percent-encoded (upper-case hex, as SigV4's
// canonical form has it).
std::string EscapeKey(absl::string_view key, bool keep_slash) {
  std::string out;
  for (const char c : key) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out += c;
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

std::string Unescape(const std::string& text) {
  int n = 0;
  char* raw = curl_easy_unescape(nullptr, text.data(), static_cast<int>(text.size()), &n);
  if (raw == nullptr) return text;
  std::string out(raw, static_cast<size_t>(n));
  curl_free(raw);
  return out;
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// One page of a ListObjectsV2 answer.
struct ListPage {
  struct Listed {
    std::string key;
    uint64_t size;
    std::string etag;
  };
  std::vector<Listed> objects;
  bool truncated = false;
  bool url_encoded = false;  // keys come URL-encoded (EncodingType url)
  std::string next_token;
};

// Parses a ListObjectsV2 answer with expat: DataLoss naming `where` for XML
// that is malformed or lacks a key's size.
absl::StatusOr<ListPage> ParseListPage(const std::string& xml, const std::string& where) {
  struct State {
    ListPage page;
    std::vector<std::string> path;  // open elements
    std::string text;
    std::string key, size, etag;
    bool bad = false;
  } st;
  XML_Parser parser = XML_ParserCreate(nullptr);
  XML_SetUserData(parser, &st);
  XML_SetElementHandler(
      parser,
      [](void* data, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<State*>(data);
        s->path.emplace_back(name);
        s->text.clear();
      },
      [](void* data, const XML_Char* name) {
        auto* s = static_cast<State*>(data);
        const std::string element = name;
        const std::string parent = s->path.size() >= 2 ? s->path[s->path.size() - 2] : "";
        if (parent == "Contents" && element == "Key") s->key = s->text;
        if (parent == "Contents" && element == "Size") s->size = s->text;
        if (parent == "Contents" && element == "ETag") s->etag = s->text;
        if (element == "Contents") {
          uint64_t size = 0;
          if (s->key.empty() || !absl::SimpleAtoi(s->size, &size)) s->bad = true;
          s->page.objects.push_back({s->key, size, s->etag});
          s->key.clear();
          s->size.clear();
          s->etag.clear();
        }
        if (element == "IsTruncated") s->page.truncated = s->text == "true";
        if (element == "NextContinuationToken") s->page.next_token = s->text;
        if (element == "EncodingType") s->page.url_encoded = s->text == "url";
        s->path.pop_back();
        s->text.clear();
      });
  XML_SetCharacterDataHandler(parser, [](void* data, const XML_Char* text, int len) {
    auto* s = static_cast<State*>(data);
    if (s->text.size() < 4096) s->text.append(text, static_cast<size_t>(len));
  });
  const bool parsed =
      XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), /*isFinal=*/1) == XML_STATUS_OK;
  const std::string error = parsed ? "" : XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  if (!parsed) return absl::DataLossError(absl::StrCat(where, ": bad listing XML: ", error));
  if (st.bad)
    return absl::DataLossError(absl::StrCat(where, ": a listed object lacks its key or size"));
  return std::move(st.page);
}

// A listed key that the listing asked for: below `prefix`, and fetched as
// the object its text names (libcurl squashes "." and ".." segments, so
// "train/../private/x" would be another object's bytes). DataLoss naming the
// key otherwise: a store that answers so is broken or hostile.
absl::Status CheckListedKey(const std::string& key, const std::string& prefix,
                            const std::string& where) {
  if (!absl::StartsWith(key, prefix)) {
    return absl::DataLossError(absl::StrCat(where, ": the store listed '", SafeText(key),
                                            "', which is not below the prefix asked for"));
  }
  for (const absl::string_view segment : absl::StrSplit(key, '/')) {
    if (segment == "." || segment == "..") {
      return absl::DataLossError(
          absl::StrCat(where, ": the store listed '", SafeText(key),
                       "', whose '.' or '..' segment would fetch another object"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct CurlObjectStore::Pool {
  HttpOptions options;
  absl::Mutex mu;
  std::vector<std::unique_ptr<HttpReader>> idle ABSL_GUARDED_BY(mu);
};

struct CurlObjectStore::Counters {
  mutable absl::Mutex mu;
  StorageStats total ABSL_GUARDED_BY(mu);
};

// A remote object of known size.
class CurlObjectStore::Object : public ByteSource {
 public:
  Object(std::shared_ptr<const CurlObjectStore> store, std::string url, Target target,
         uint64_t size, std::string version)
      : store_(std::move(store)),
        url_(std::move(url)),
        target_(std::move(target)),
        size_(size),
        version_(std::move(version)) {}
  const std::string& name() const override { return url_; }
  uint64_t size() const override { return size_; }
  std::string version() const override { return version_; }
  absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
    if (offset > size_ || length > size_ - offset) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes at offset %d run past its end (%d)",
                                                 RedactedUrl(url_), length, offset, size_));
    }
    if (length == 0) return absl::OkStatus();
    if (!store_->RangesIgnored(target_.http_url)) {
      absl::Status st =
          Naming(url_, target_.http_url, store_->WithReader(target_.pool, [&](HttpReader& r) {
            return r.ReadRange(target_.http_url, static_cast<int64_t>(offset),
                               static_cast<int64_t>(length), dst);
          }));
      if (!absl::IsUnimplemented(st)) return st;
      store_->NoteRangesIgnored(target_.http_url);
    }
    return store_->ReadWhole(url_, target_, size_, version_, offset, length, dst);
  }

 private:
  const std::shared_ptr<const CurlObjectStore> store_;
  const std::string url_;
  const Target target_;
  const uint64_t size_;
  const std::string version_;
};

absl::Status S3FromEnvironment(ObjectStoreOptions* options) {
  const char* key = Env("AWS_ACCESS_KEY_ID");
  const char* secret = Env("AWS_SECRET_ACCESS_KEY");
  if ((key == nullptr) != (secret == nullptr)) {
    return absl::InvalidArgumentError(
        key != nullptr ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                       : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
  }
  if (key != nullptr) {
    options->access_key_id = key;
    options->secret_access_key = secret;
    options->credential_source =
        absl::StrCat("access key ", SafeText(key), " from AWS_ACCESS_KEY_ID in the environment");
  }
  if (const char* token = Env("AWS_SESSION_TOKEN")) options->session_token = token;
  if (const char* region = Env("AWS_REGION")) {
    options->s3_region = region;
  } else if (const char* fallback = Env("AWS_DEFAULT_REGION")) {
    options->s3_region = fallback;
  }
  const char* endpoint = Env("AWS_ENDPOINT_URL_S3");
  const char* name = "AWS_ENDPOINT_URL_S3";
  if (endpoint == nullptr) {
    endpoint = Env("AWS_ENDPOINT_URL");
    name = "AWS_ENDPOINT_URL";
  }
  if (endpoint != nullptr) {
    options->s3_endpoint = endpoint;
    while (absl::EndsWith(options->s3_endpoint, "/")) options->s3_endpoint.pop_back();
    if (!absl::StartsWith(options->s3_endpoint, "http://") &&
        !absl::StartsWith(options->s3_endpoint, "https://")) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", SafeText(endpoint), "' is not an http:// or https:// URL"));
    }
  }
  for (const char c : options->s3_region) {
    if (!absl::ascii_isalnum(c) && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("AWS region '", SafeText(options->s3_region), "' is not a region name"));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<CurlObjectStore> CurlObjectStore::Create(ObjectStoreOptions options) {
  return std::shared_ptr<CurlObjectStore>(new CurlObjectStore(std::move(options)));
}

CurlObjectStore::CurlObjectStore(ObjectStoreOptions options)
    : options_(std::move(options)),
      http_(std::make_unique<Pool>()),
      s3_(std::make_unique<Pool>()),
      counters_(std::make_unique<Counters>()),
      whole_(std::make_unique<WholeObjects>(options_.whole_objects)) {
  http_->options = options_.http;
  http_->options.aws_sigv4.clear();
  http_->options.user_password.clear();
  s3_->options = options_.http;
  if (!options_.access_key_id.empty()) {
    s3_->options.aws_sigv4 = absl::StrCat("aws:amz:", options_.s3_region, ":s3");
    s3_->options.user_password =
        absl::StrCat(options_.access_key_id, ":", options_.secret_access_key);
    if (!options_.session_token.empty()) {
      s3_->options.headers.push_back(
          absl::StrCat("x-amz-security-token: ", options_.session_token));
    }
  }
  s3_->options.credential_note = options_.credential_source;
}

CurlObjectStore::~CurlObjectStore() = default;

absl::StatusOr<CurlObjectStore::Target> CurlObjectStore::Resolve(const std::string& url) const {
  if (absl::StartsWith(url, "http://") || absl::StartsWith(url, "https://")) {
    return Target{url, http_.get()};
  }
  if (!absl::StartsWith(url, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        RedactedUrl(url), ": not a URL this program reads (http://, https://, s3://)"));
  }
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  bool valid = bucket.size() >= 3 && bucket.size() <= 63;
  for (const char c : bucket) {
    valid = valid &&
            (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.' || c == '_');
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat(RedactedUrl(url), ": '", SafeText(bucket),
                     "' is not an S3 bucket name (3-63 lower-case letters, digits, '.', '-')"));
  }
  const std::string path = EscapeKey(key, /*keep_slash=*/true);
  const std::string http_url =
      options_.s3_endpoint.empty()
          ? absl::StrCat("https://", bucket, ".s3.", options_.s3_region, ".amazonaws.com/", path)
          : absl::StrCat(options_.s3_endpoint, "/", bucket, "/", path);
  return Target{http_url, s3_.get()};
}

absl::Status CurlObjectStore::WithReader(
    Pool* pool, const std::function<absl::Status(HttpReader&)>& request) const {
  std::unique_ptr<HttpReader> reader;
  {
    absl::MutexLock lock(&pool->mu);
    if (!pool->idle.empty()) {
      reader = std::move(pool->idle.back());
      pool->idle.pop_back();
    }
  }
  if (reader == nullptr) reader = std::make_unique<HttpReader>(pool->options);
  const StorageStats before = reader->stats();
  absl::Status status = request(*reader);
  const StorageStats cost = static_cast<const StorageStats&>(reader->stats()).Minus(before);
  ThreadStorageStats().Add(cost);
  {
    absl::MutexLock lock(&counters_->mu);
    counters_->total.Add(cost);
  }
  absl::MutexLock lock(&pool->mu);
  pool->idle.push_back(std::move(reader));
  return status;
}

namespace {

// "http://host:port" of an http(s) URL.
std::string HostOf(const std::string& http_url) {
  const size_t scheme = http_url.find("://");
  const size_t path = http_url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return http_url.substr(0, path);
}

}  // namespace

bool CurlObjectStore::RangesIgnored(const std::string& http_url) const {
  if (!any_range_ignored_.load(std::memory_order_acquire)) return false;
  absl::MutexLock lock(&hosts_mu_);
  return no_range_hosts_.count(HostOf(http_url)) > 0;
}

void CurlObjectStore::NoteRangesIgnored(const std::string& http_url) const {
  const std::string host = HostOf(http_url);
  absl::MutexLock lock(&hosts_mu_);
  if (!no_range_hosts_.insert(host).second) return;
  any_range_ignored_.store(true, std::memory_order_release);
  const WholeObjectOptions& w = options_.whole_objects;
  spdlog::info(
      "storage: {} ignores Range requests (it answered a ranged GET with the whole object): "
      "each of its objects is now fetched whole once and read from that copy, kept in {} "
      "(at most {} bytes: --whole-object-bytes)",
      RedactedUrl(host), w.dir.empty() ? "memory" : "--whole-object-dir " + w.dir, w.max_bytes);
}

absl::Status CurlObjectStore::ReadWhole(const std::string& url, const Target& target, uint64_t size,
                                        const std::string& version, uint64_t offset, size_t length,
                                        uint8_t* dst) const {
  const auto fetch = [&]() -> absl::StatusOr<std::string> {
    std::string body;
    absl::Status st = WithReader(target.pool, [&](HttpReader& r) {
      absl::StatusOr<std::string> got = r.Fetch(target.http_url, static_cast<int64_t>(size));
      if (!got.ok()) return got.status();
      body = *std::move(got);
      return absl::OkStatus();
    });
    if (!st.ok()) return Naming(url, target.http_url, st);
    return body;
  };
  bool fetched = false;
  absl::Status st = whole_->ReadAt(url, version, size, offset, length, dst, fetch, &fetched);
  if (!fetched) return st;
  ++ThreadStorageStats().whole_objects;
  {
    absl::MutexLock lock(&counters_->mu);
    ++counters_->total.whole_objects;
  }
  if (whole_->counters().refetches > 0) {
    absl::MutexLock lock(&hosts_mu_);
    if (!std::exchange(warned_refetch_, true)) {
      spdlog::warn(
          "storage: {} was fetched whole again after its copy was dropped for room: the "
          "objects read whole do not fit --whole-object-bytes ({}); raise it{}",
          RedactedUrl(url), options_.whole_objects.max_bytes,
          options_.whole_objects.dir.empty() ? ", with --whole-object-dir to keep them on disk"
                                             : "");
    }
  }
  return st;
}

absl::StatusOr<std::unique_ptr<ByteSource>> CurlObjectStore::Open(
    const std::string& url, int64_t size, const std::string& known_version) const {
  absl::StatusOr<Target> target = Resolve(url);
  if (!target.ok()) return target.status();
  std::string version = known_version;
  if (size < 0) {
    absl::Status st = WithReader(target->pool, [&](HttpReader& r) {
      absl::StatusOr<HttpReader::ObjectHead> head = r.Head(target->http_url);
      if (!head.ok()) return head.status();
      size = head->size;
      version = head->etag;
      return absl::OkStatus();
    });
    if (!st.ok()) return Naming(url, target->http_url, st);
  }
  return std::unique_ptr<ByteSource>(new Object(shared_from_this(), url, *std::move(target),
                                                static_cast<uint64_t>(size), std::move(version)));
}

absl::StatusOr<std::vector<ObjectInfo>> CurlObjectStore::List(const std::string& prefix) const {
  if (!absl::StartsWith(prefix, "s3://")) {
    return absl::UnimplementedError(
        absl::StrCat("cannot list ", RedactedUrl(prefix),
                     ": HTTP has no listing; name the shards with a brace pattern "
                     "(https://host/path/shard-{000000..000099}.tar)"));
  }
  const std::string rest = prefix.substr(5);
  const size_t slash = rest.find('/');
  return ListS3(rest.substr(0, slash), slash == std::string::npos ? "" : rest.substr(slash + 1));
}

absl::StatusOr<std::vector<ObjectInfo>> CurlObjectStore::ListS3(const std::string& bucket,
                                                                const std::string& prefix) const {
  absl::StatusOr<Target> base = Resolve(absl::StrCat("s3://", bucket, "/"));
  if (!base.ok()) return base.status();
  std::vector<ObjectInfo> objects;
  std::string token;
  while (true) {
    // Query parameters in sorted order, encoded: SigV4's canonical form.
    std::string url = absl::StrCat(base->http_url, "?");
    if (!token.empty()) {
      absl::StrAppend(&url, "continuation-token=", EscapeKey(token, false), "&");
    }
    absl::StrAppend(&url, "encoding-type=url&list-type=2&max-keys=", options_.list_page_objects,
                    "&prefix=", EscapeKey(prefix, false));
    std::string xml;
    absl::Status st = WithReader(base->pool, [&](HttpReader& r) {
      absl::StatusOr<std::string> body = r.Fetch(url, options_.max_listing_page_bytes);
      if (!body.ok()) return body.status();
      xml = *std::move(body);
      return absl::OkStatus();
    });
    const std::string where = absl::StrCat("listing s3://", bucket, "/", SafeText(prefix));
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(where, ": ", st.message()));
    absl::StatusOr<ListPage> page = ParseListPage(xml, where);
    if (!page.ok()) return page.status();
    for (ListPage::Listed& o : page->objects) {
      const std::string name = page->url_encoded ? Unescape(o.key) : o.key;
      if (absl::Status s = CheckListedKey(name, prefix, where); !s.ok()) return s;
      objects.push_back({absl::StrCat("s3://", bucket, "/", name), o.size, std::move(o.etag)});
    }
    if (static_cast<int64_t>(objects.size()) > options_.max_listed_objects) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": over ", options_.max_listed_objects, " objects"));
    }
    if (!page->truncated) break;
    if (page->next_token.empty() || page->next_token == token || page->objects.empty()) {
      return absl::DataLossError(
          absl::StrCat(where, ": a truncated page without a new continuation token or objects"));
    }
    token = page->next_token;
  }
  std::sort(objects.begin(), objects.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.url < b.url; });
  return objects;
}

absl::Status CurlObjectStore::Put(const std::string& url, const uint8_t* data, size_t size) const {
  absl::StatusOr<Target> target = Resolve(url);
  if (!target.ok()) return target.status();
  return Naming(url, target->http_url, WithReader(target->pool, [&](HttpReader& r) {
                  return r.Put(target->http_url, data, size);
                }));
}

absl::Status CurlObjectStore::Delete(const std::string& url) const {
  absl::StatusOr<Target> target = Resolve(url);
  if (!target.ok()) return target.status();
  return Naming(url, target->http_url, WithReader(target->pool, [&](HttpReader& r) {
                  return r.Delete(target->http_url);
                }));
}

StorageStats CurlObjectStore::stats() const {
  absl::MutexLock lock(&counters_->mu);
  return counters_->total;
}

}  // namespace prepflow
