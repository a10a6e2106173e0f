#include "pipeline/data/tar.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace prepflow {
namespace {

constexpr size_t kBlock = 512;

uint64_t RoundUp(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// Octal (NUL/space terminated), or GNU base-256 when the top bit is set.
// False for a malformed field or a value of 2^63 or more (no file is that
// big, and offsets computed from it must not wrap).
bool ParseNumber(const char* field, size_t len, uint64_t* out) {
  constexpr uint64_t kMax = uint64_t{1} << 63;
  const auto* u = reinterpret_cast<const unsigned char*>(field);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return false;  // negative, or beyond 2^63 in any case
    uint64_t v = 0;
    for (size_t i = 1; i < len; ++i) {
      if (v >= (kMax >> 8)) return false;
      v = (v << 8) | u[i];
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && field[i] == ' ') ++i;
  bool any = false;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >= (kMax >> 3)) return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  *out = v;
  return any || field[0] == '\0';
}

std::string Field(const char* p, size_t len) { return std::string(p, strnlen(p, len)); }

// The member's name: a preceding GNU long name or pax path, else the
// header's (ustar prefix / name).
std::string MemberName(const char* h, const std::string& long_name) {
  if (!long_name.empty()) return long_name;
  const std::string prefix = std::memcmp(h + 257, "ustar", 5) == 0 ? Field(h + 345, 155) : "";
  return prefix.empty() ? Field(h, 100) : absl::StrCat(prefix, "/", Field(h, 100));
}

// Reads pax records ("<len> <key>=<value>\n") for the member's path and
// size; stops at the first malformed record. DataLoss for a size that is not
// a number below 2^63.
absl::Status ParsePax(const std::string& ext, std::string* long_name, uint64_t* pax_size,
                      bool* have_pax_size) {
  size_t pos = 0;
  while (pos < ext.size()) {
    const size_t space = ext.find(' ', pos);
    uint64_t len = 0;
    // A record holds its length, a space, key=value and a newline.
    if (space == std::string::npos || !absl::SimpleAtoi(ext.substr(pos, space - pos), &len) ||
        len > ext.size() - pos || len < space - pos + 2) {
      break;
    }
    const std::string record = ext.substr(space + 1, pos + len - space - 2);
    const size_t eq = record.find('=');
    if (eq != std::string::npos) {
      const std::string key = record.substr(0, eq), value = record.substr(eq + 1);
      if (key == "path") *long_name = value;
      if (key == "size") {
        if (!absl::SimpleAtoi(value, pax_size) || *pax_size >= (uint64_t{1} << 63)) {
          return absl::DataLossError(absl::StrCat("bad pax size record '", value, "'"));
        }
        *have_pax_size = true;
      }
    }
    pos += len;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ScanTar(const ByteSource& source,
                     const std::function<absl::Status(const TarMember&)>& visit) {
  const std::string& path = source.name();
  const uint64_t file_size = source.size();
  uint64_t offset = 0;
  std::string long_name;  // from a GNU 'L' entry or pax 'path'
  uint64_t pax_size = 0;
  bool have_pax_size = false;
  char h[kBlock];
  while (true) {
    if (offset == file_size) return absl::OkStatus();  // archive without end blocks
    if (file_size - offset < kBlock) {
      return absl::DataLossError(absl::StrCat(path, ": truncated tar header at offset ", offset));
    }
    if (absl::Status s = source.ReadAt(offset, kBlock, reinterpret_cast<uint8_t*>(h)); !s.ok()) {
      return s;
    }
    bool zero = true;
    for (char c : h) zero = zero && c == 0;
    if (zero) return absl::OkStatus();  // end of archive

    uint64_t stored_sum = 0, size = 0;
    unsigned sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (!ParseNumber(h + 148, 8, &stored_sum) || stored_sum != sum ||
        !ParseNumber(h + 124, 12, &size)) {
      return absl::DataLossError(
          absl::StrCat(path, ": bad tar header (checksum or size) at offset ", offset));
    }
    const char type = h[156];
    // offset + 512 <= file_size (a whole header was read there), so neither
    // this comparison nor the next offset can wrap, and every step moves on
    // by at least one block: the scan ends on any input.
    const uint64_t data = offset + kBlock;
    if (have_pax_size) size = pax_size;
    if (size > file_size - data) {
      return absl::DataLossError(absl::StrFormat(
          "%s: tar member '%s' at offset %d claims %d bytes, past the end of the file (%d bytes)",
          path, MemberName(h, long_name), offset, size, file_size));
    }
    if (type == 'L' || type == 'x') {
      if (size > (1 << 20)) {
        return absl::DataLossError(
            absl::StrCat(path, ": oversized tar extension header at offset ", offset));
      }
      std::string ext(size, '\0');
      if (absl::Status s = source.ReadAt(data, size, reinterpret_cast<uint8_t*>(ext.data()));
          !s.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": unreadable tar extension at offset ", offset));
      }
      if (type == 'L') {
        long_name = ext.substr(0, strnlen(ext.data(), ext.size()));
      } else if (absl::Status s = ParsePax(ext, &long_name, &pax_size, &have_pax_size); !s.ok()) {
        return absl::DataLossError(absl::StrCat(path, ": ", s.message(), " at offset ", offset));
      }
      offset = data + RoundUp(size);
      continue;
    }
    if (type == '0' || type == '\0' || type == '7') {
      TarMember m;
      m.name = MemberName(h, long_name);
      m.offset = data;
      m.size = size;
      if (absl::Status s = visit(m); !s.ok()) return s;
    }
    long_name.clear();
    have_pax_size = false;
    offset = data + RoundUp(size);
  }
}

TarWriter::~TarWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TarWriter::Open(const std::string& path) {
  path_ = path;
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  bytes_ = 0;
  members_.clear();
  return absl::OkStatus();
}

absl::Status TarWriter::Write(const void* data, size_t size) {
  if (size != 0 && std::fwrite(data, 1, size, file_) != size) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  bytes_ += size;
  return absl::OkStatus();
}

absl::Status TarWriter::Add(absl::string_view name, const void* data, size_t size) {
  if (name.empty() || name.size() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("tar member name '", name, "' must be 1-100 bytes"));
  }
  char h[kBlock] = {};
  std::memcpy(h, name.data(), name.size());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);  // magic "ustar\0"
  h[263] = '0';
  h[264] = '0';
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h + 148, 8, "%06o", sum);  // 6 digits, NUL, space
  h[155] = ' ';
  if (absl::Status s = Write(h, kBlock); !s.ok()) return s;
  members_.push_back({std::string(name), bytes_, size});
  if (absl::Status s = Write(data, size); !s.ok()) return s;
  static const char kZeros[kBlock] = {};
  return Write(kZeros, RoundUp(size) - size);
}

void TarWriter::Abandon() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

absl::Status TarWriter::Close() {
  static const char kZeros[2 * kBlock] = {};
  absl::Status s = Write(kZeros, sizeof(kZeros));
  if (std::fclose(file_) != 0 && s.ok()) {
    s = absl::Status(absl::ErrnoToStatusCode(errno),
                     absl::StrCat("cannot close ", path_, ": ", std::strerror(errno)));
  }
  file_ = nullptr;
  return s;
}

}  // namespace prepflow
