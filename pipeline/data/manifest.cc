// A manifest: one sample per line, as a JSON Lines file of objects (NeMo's
// audio manifests, PyTorchVideo-style video lists)
//   {"audio_filepath": "wav/1.flac", "duration": 3.2, "text": "go ahead"}
//   {"video_filepath": "v/abseiling/x.mp4", "label": "abseiling", "start": 2.5, "end": 12.5}
// or a CSV file whose first row names the same columns
//   path,label,start,end
//   v/abseiling/x.mp4,abseiling,2.5,12.5
// The file: audio_filepath, video_filepath or path (the first given),
// relative to the manifest's folder (or absolute); duration in seconds
// (optional: what bucketing by length reads without decoding); text
// (optional: the transcript, carried to the batch untouched); label
// (optional: a class name, or a non-negative integer); start and end
// (optional, videos only: the part of the video decode_video samples its
// clip in, seconds). Samples are the lines in order. The manifest is one
// file read whole, so --max-file-bytes bounds it as it bounds a sample.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/text.h"
#include "nlohmann/json.hpp"
#include "pipeline/data/datasets.h"

namespace prepflow::detail {
namespace {

using Json = nlohmann::json;

// One line's fields, checked.
struct Entry {
  std::string path;
  double duration = -1;  // unknown
  std::string text;
  bool has_text = false;
  enum { kNone, kName, kNumber } label = kNone;
  std::string label_name;
  int64_t label_number = -1;
  MediaWindow window;
  int64_t line = 0;  // where it is, for messages
};

class ManifestDataset : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& path,
                                                       const Configure& configure) {
    auto ds = std::unique_ptr<ManifestDataset>(new ManifestDataset);
    configure(ds.get());
    struct stat st;
    absl::StatusOr<int> fd = ds->OpenForRead(path, &st);
    if (!fd.ok()) return fd.status();
    Buffer bytes;
    size_t size = 0;
    if (absl::Status s = ReadFile(*fd, st, path, ds->max_file_bytes_, &bytes, &size); !s.ok()) {
      return s;
    }
    const std::string folder = path.find('/') == std::string::npos
                                   ? std::string(".")
                                   : path.substr(0, std::max<size_t>(path.rfind('/'), 1));
    const absl::string_view text(reinterpret_cast<const char*>(bytes.data()), size);
    if (absl::Status s = ds->Parse(path, folder, text); !s.ok()) return s;
    if (ds->paths_.empty()) {
      return absl::NotFoundError(absl::StrCat("manifest ", path, " lists no samples"));
    }
    std::vector<std::string> all = ds->paths_;
    all.push_back(path);
    ds->root_ = SharedFolder(all);
    return ds;
  }

  const char* format() const override { return "manifest"; }
  std::string SamplePath(int64_t i) const override { return paths_[i]; }
  std::string Extension(int64_t i) const override { return LowerExtension(paths_[i]); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    uint64_t whole = 0;
    return ReadLocal(paths_[i], SIZE_MAX, out, size, &whole);
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    return ReadLocal(paths_[i], max_bytes, out, size, whole);
  }
  uint64_t SourceVersion(int64_t i) const override {
    struct stat st;
    return stat(paths_[i].c_str(), &st) == 0 ? FileVersion(st) : 0;
  }

 private:
  absl::Status Parse(const std::string& path, const std::string& folder, absl::string_view text);
  absl::Status SetLabels(const std::string& path, const std::vector<Entry>& entries);

  std::vector<std::string> paths_;
};

// A line's start and end (seconds, a video's only).
absl::Status ReadWindow(const Json& line, const std::string& where, const std::string& path,
                        MediaWindow* w) {
  double* times[2] = {&w->start, &w->end};
  const char* names[2] = {"start", "end"};
  for (int k = 0; k < 2; ++k) {
    const auto t = line.find(names[k]);
    if (t == line.end() || t->is_null()) continue;
    if (!t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() < 0 ||
        t->get<double>() > kMaxVideoSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", names[k], ": expected seconds, a number in [0, ", kMaxVideoSeconds, "]"));
    }
    if (!IsVideoExtension(LowerExtension(path))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", names[k],
                       ": only a video's part is read (decode_video); cut other "
                       "media into files of their own"));
    }
    *times[k] = t->get<double>();
  }
  if (w->end >= 0 && w->end <= w->start) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": end: must be after start (", w->start, " s), got ", w->end));
  }
  return absl::OkStatus();
}

// Checks one parsed line; `where` is "manifest.jsonl:7".
absl::StatusOr<Entry> ReadEntry(const Json& line, const std::string& where) {
  if (!line.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  Entry e;
  const char* key = "audio_filepath";
  for (const char* k : {"audio_filepath", "video_filepath", "path"}) {
    if (line.contains(k)) {
      key = k;
      break;
    }
  }
  const auto file = line.find(key);
  if (file == line.end() || !file->is_string() || file->get_ref<const std::string&>().empty()) {
    const absl::string_view kind = key[0] == 'a' ? "audio " : key[0] == 'v' ? "video " : "";
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", key, ": expected the ", kind,
                     "file's path (a string; audio_filepath, video_filepath or path)"));
  }
  e.path = file->get<std::string>();
  if (e.path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, " holds a NUL byte"));
  }
  if (absl::Status s = ReadWindow(line, where, e.path, &e.window); !s.ok()) return s;
  if (const auto d = line.find("duration"); d != line.end() && !d->is_null()) {
    if (!d->is_number() || !std::isfinite(d->get<double>()) || d->get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": duration: expected seconds, a number >= 0"));
    }
    e.duration = d->get<double>();
  }
  if (const auto o = line.find("offset"); o != line.end() && !o->is_null()) {
    if (!o->is_number() || o->get<double>() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ": offset: segments of a file are not supported; cut the audio "
                       "into files of their own, or leave offset 0"));
    }
  }
  if (const auto t = line.find("text"); t != line.end() && !t->is_null()) {
    if (!t->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": text: expected a string"));
    }
    e.text = t->get<std::string>();
    e.has_text = true;
  }
  if (const auto l = line.find("label"); l != line.end() && !l->is_null()) {
    if (!l->is_string() && !(l->is_number_integer() && l->get<int64_t>() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": label: expected a class name or an integer >= 0"));
    }
    if (l->is_string()) {
      e.label = Entry::kName;
      e.label_name = l->get<std::string>();
    } else {
      e.label = Entry::kNumber;
      e.label_number = l->get<int64_t>();
    }
  }
  return e;
}

// A manifest's lines as JSON objects, each with its line number.
using Lines = std::vector<std::pair<int64_t, Json>>;

absl::Status JsonLines(const std::string& path, absl::string_view text, Lines* out) {
  int64_t number = 0;
  for (absl::string_view rest = text; !rest.empty();) {
    const size_t end = std::min(rest.find('\n'), rest.size());
    const absl::string_view line = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 1, rest.size()));
    ++number;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    Json json = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(SafeText(path), ":", number, ": not valid JSON"));
    }
    out->emplace_back(number, std::move(json));
  }
  return absl::OkStatus();
}

// One CSV row (RFC 4180: fields split at commas, a "quoted" field may hold
// commas, line breaks and "" for a quote) from `*rest`, counting lines.
absl::Status CsvRow(absl::string_view* rest, int64_t* line, std::vector<std::string>* fields) {
  fields->assign(1, "");
  bool quoted = false;
  size_t i = 0;
  for (; i < rest->size(); ++i) {
    const char c = (*rest)[i];
    if (quoted) {
      if (c == '"' && i + 1 < rest->size() && (*rest)[i + 1] == '"') {
        fields->back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        *line += c == '\n';
        fields->back() += c;
      }
    } else if (c == '"' && fields->back().empty()) {
      quoted = true;
    } else if (c == ',') {
      fields->emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields->back() += c;
    }
  }
  rest->remove_prefix(std::min(i + 1, rest->size()));
  ++*line;
  if (quoted) return absl::InvalidArgumentError("a quoted field runs to the end of the file");
  return absl::OkStatus();
}

// A CSV cell as JSON: seconds as numbers, a label of digits as an integer,
// anything else as text; an empty cell as absent (null).
Json CsvCell(const std::string& column, const std::string& cell) {
  if (cell.empty()) return nullptr;
  double seconds = 0;
  if ((column == "start" || column == "end" || column == "duration") &&
      absl::SimpleAtod(cell, &seconds)) {
    return seconds;
  }
  int64_t number = 0;
  if (column == "label" && cell.size() <= 18 &&
      cell.find_first_not_of("0123456789") == std::string::npos &&
      absl::SimpleAtoi(cell, &number)) {
    return number;
  }
  return cell;
}

absl::Status CsvLines(const std::string& path, absl::string_view text, Lines* out) {
  std::vector<std::string> header, fields;
  int64_t number = 0;
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);  // a spreadsheet's BOM
  while (!text.empty() && header.empty()) {
    if (absl::Status s = CsvRow(&text, &number, &header); !s.ok()) return s;
    if (header.size() == 1 && absl::StripAsciiWhitespace(header[0]).empty()) header.clear();
  }
  for (std::string& name : header) name = std::string(absl::StripAsciiWhitespace(name));
  while (!text.empty()) {
    const int64_t first = number + 1;
    if (absl::Status s = CsvRow(&text, &number, &fields); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(SafeText(path), ":", first, ": ", s.message()));
    }
    if (fields.size() == 1 && absl::StripAsciiWhitespace(fields[0]).empty()) continue;
    if (fields.size() != header.size()) {
      return absl::InvalidArgumentError(absl::StrCat(SafeText(path), ":", first, ": ",
                                                     fields.size(), " fields, and the header ",
                                                     header.size()));
    }
    Json row = Json::object();
    for (size_t c = 0; c < header.size(); ++c) row[header[c]] = CsvCell(header[c], fields[c]);
    out->emplace_back(first, std::move(row));
  }
  return absl::OkStatus();
}

absl::Status ManifestDataset::Parse(const std::string& path, const std::string& folder,
                                    absl::string_view text) {
  Lines lines;
  absl::Status read =
      absl::EndsWith(path, ".csv") ? CsvLines(path, text, &lines) : JsonLines(path, text, &lines);
  if (!read.ok()) return read;
  std::vector<Entry> entries;
  bool any_text = false, any_duration = false, any_window = false;
  for (const auto& [number, json] : lines) {
    absl::StatusOr<Entry> e = ReadEntry(json, absl::StrCat(SafeText(path), ":", number));
    if (!e.ok()) return e.status();
    e->line = number;
    any_text |= e->has_text;
    any_duration |= e->duration >= 0;
    any_window |= e->window.start > 0 || e->window.end >= 0;
    paths_.push_back(e->path[0] == '/' ? e->path : absl::StrCat(folder, "/", e->path));
    entries.push_back(*std::move(e));
  }
  for (const Entry& e : entries) {
    if (any_text) texts_.push_back(e.text);
    if (any_duration) durations_.push_back(e.duration);
    if (any_window) windows_.push_back(e.window);
  }
  return SetLabels(path, entries);
}

// Class names sorted (a label's number is its place), or integers as they
// are; the two do not mix, and a manifest with labels has one on every line.
absl::Status ManifestDataset::SetLabels(const std::string& path,
                                        const std::vector<Entry>& entries) {
  std::map<std::string, int64_t> names;
  for (const Entry& e : entries) {
    if (e.label != entries[0].label) {
      return absl::InvalidArgumentError(absl::StrCat(
          SafeText(path), ":", e.line,
          ": label: every line needs one, all class names or all integers, as the first line's"));
    }
    if (e.label == Entry::kName) names.emplace(e.label_name, 0);
  }
  int64_t next = 0;
  for (auto& [name, label] : names) {
    label = next++;
    classes_.push_back(name);
  }
  for (const Entry& e : entries) {
    labels_.push_back(e.label == Entry::kName ? names[e.label_name] : e.label_number);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenManifest(const std::string& path,
                                                      const Configure& configure) {
  return ManifestDataset::Open(path, configure);
}

}  // namespace prepflow::detail
