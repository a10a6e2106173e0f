// Records of several fields: a WebDataset sample's image and audio run
// through one pipeline, each stage on its field, with a carried member; the
// record is the same at every cut, through the wire and the caches' bytes,
// and batches hold every field.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/wire.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/tar.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::Jpeg;
using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::TempDir;
using ::prepflow::testing::WriteFile;
using ::testing::HasSubstr;

// A mono 16-bit PCM WAV of `frames` frames of a tone at `rate` Hz.
std::vector<uint8_t> Wav(int frames, int rate, double hz) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto tag = [&](const char* t) { out.insert(out.end(), t, t + 4); };
  tag("RIFF");
  put(36 + 2 * frames, 4);
  tag("WAVE");
  tag("fmt ");
  put(16, 4);
  put(1, 2);  // PCM
  put(1, 2);  // mono
  put(rate, 4);
  put(rate * 2, 4);
  put(2, 2);
  put(16, 2);
  tag("data");
  put(2 * frames, 4);
  for (int t = 0; t < frames; ++t) {
    put(static_cast<uint16_t>(static_cast<int16_t>(12000 * std::sin(2 * M_PI * hz * t / rate))), 2);
  }
  return out;
}

// Six records: key.jpg, key.wav (but record 3's), key.json, key.cls.
std::string WriteShard(const TempDir& dir) {
  const std::string path = dir.Join("records.tar");
  TarWriter w;
  EXPECT_TRUE(w.Open(path).ok());
  for (int i = 0; i < 6; ++i) {
    const std::string key = absl::StrCat("r", i);
    const std::vector<uint8_t> jpeg = Jpeg(40 + 8 * i, 36 + 4 * i, i + 1);
    const std::vector<uint8_t> wav = Wav(600 + 150 * i, 16000, 300 + 50 * i);
    const std::string json = absl::StrCat("{\"i\": ", i, "}"), cls = absl::StrCat(i % 2);
    EXPECT_TRUE(w.Add(key + ".jpg", jpeg.data(), jpeg.size()).ok());
    if (i != 3) {
      EXPECT_TRUE(w.Add(key + ".wav", wav.data(), wav.size()).ok());
    }
    EXPECT_TRUE(w.Add(key + ".json", json.data(), json.size()).ok());
    EXPECT_TRUE(w.Add(key + ".cls", cls.data(), cls.size()).ok());
  }
  EXPECT_TRUE(w.Close().ok());
  return path;
}

// The image and the audio stages interleaved, moving between the fields
// five times, with random draws on both.
constexpr char kRecordPipeline[] = R"pb(
  stages {
    decode_audio {}
    field: "wav"
  }
  stages {
    decode {}
    field: "jpg"
  }
  stages {
    downmix {}
    field: "wav"
  }
  stages {
    resample { rate: 16000 }
    field: "wav"
  }
  stages {
    center_crop { size: 32 }
    field: "jpg"
  }
  stages {
    random_segment { frames: 400 }
    field: "wav"
  }
  stages {
    random_horizontal_flip { p: 0.5 }
    field: "jpg"
  }
  stages {
    normalize {}
    field: "jpg"
  }
  carry: "json"
)pb";

std::unique_ptr<Dataset> OpenShard(const std::string& path) {
  proto::DatasetSpec spec;
  spec.set_path(path);
  auto ds = OpenDataset(spec);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? *std::move(ds) : nullptr;
}

// Reads record i and runs stages [0, cut), sends the record through the
// wire's bytes, and runs [cut, n) in a fresh workspace: RecordHash of the
// result.
absl::StatusOr<uint64_t> RunCut(const Dataset& ds, const Pipeline& p, int64_t i, int cut) {
  Workspace ws;
  Sample s;
  s.index = i;
  s.label = ds.label(i);
  size_t bytes = 0;
  if (absl::Status st = ReadRecord(ds, p.fields(), ws, s, &bytes); !st.ok()) return st;
  if (absl::Status st = p.Run(0, cut, s, ws); !st.ok()) return st;
  proto::SampleValue value;
  ToWire(s, &value);
  proto::SampleValue parsed;
  EXPECT_TRUE(parsed.ParseFromString(value.SerializeAsString()));
  Workspace other;
  Sample t;
  t.index = s.index;
  t.label = s.label;
  if (absl::Status st = FromWire(parsed, other, t); !st.ok()) return st;
  if (absl::Status st = p.Run(cut, p.num_stages(), t, other); !st.ok()) return st;
  // And through the bytes a cache or the echo store keeps.
  Workspace third;
  Sample u;
  u.index = t.index;
  u.label = t.label;
  if (absl::Status st = FromValueBytes(ValueBytes(t), third, u); !st.ok()) return st;
  EXPECT_EQ(RecordHash(u), RecordHash(t));
  return RecordHash(t);
}

TEST(Records, EveryCutGivesTheLocalRecord) {
  TempDir dir;
  auto ds = OpenShard(WriteShard(dir));
  ASSERT_NE(ds, nullptr);
  ASSERT_TRUE(ds->has_members());
  auto p = MakePipeline(kRecordPipeline, /*seed=*/7);
  ASSERT_NE(p, nullptr);
  EXPECT_THAT(p->fields(), ::testing::ElementsAre("wav", "jpg", "json"));
  EXPECT_TRUE(p->record());
  for (int64_t i : {0, 1, 2, 4, 5}) {
    absl::StatusOr<uint64_t> local = RunCut(*ds, *p, i, 0);
    ASSERT_TRUE(local.ok()) << local.status();
    for (int cut = 1; cut <= p->num_stages(); ++cut) {
      absl::StatusOr<uint64_t> h = RunCut(*ds, *p, i, cut);
      ASSERT_TRUE(h.ok()) << "record " << i << " cut " << cut << ": " << h.status();
      EXPECT_EQ(*h, *local) << "record " << i << " cut " << cut;
    }
  }
}

TEST(Records, OutputHoldsEveryFieldAndItsTypes) {
  auto p = MakePipeline(kRecordPipeline);
  ASSERT_NE(p, nullptr);
  const std::vector<BatchField> out = p->OutputFields();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].key, "jpg");  // the last stage's
  EXPECT_EQ(out[0].type.DebugString(), ValueType({ValueKind::kTensor, {3, 32, 32}}).DebugString());
  EXPECT_EQ(out[1].key, "json");
  EXPECT_EQ(out[1].type.kind, ValueKind::kEncoded);
  EXPECT_EQ(out[2].key, "wav");
  EXPECT_EQ(out[2].type.kind, ValueKind::kAudio);
  EXPECT_EQ(p->WhyNotBatchable(), "");
  // A record's bound is every field's.
  const int64_t file = 1 << 20;
  EXPECT_EQ(p->MaxBytesAt(0, file), 3 * file);
  EXPECT_EQ(p->MaxBytesAt(p->num_stages(), file), 3 * 32 * 32 * 4 + file + 400 * 4);
}

TEST(Records, BatchesHoldEveryField) {
  TempDir dir;
  auto ds = OpenShard(WriteShard(dir));
  ASSERT_NE(ds, nullptr);
  auto p = MakePipeline(kRecordPipeline, 7);
  ASSERT_NE(p, nullptr);
  Batch batch(p->OutputFields(), 4);
  const std::vector<int64_t> indices = {5, 3, 1, 0};  // 3 has no wav
  batch.Reset(0, 0, indices);
  for (int64_t slot = 0; slot < 4; ++slot) {
    Workspace ws;
    Sample s;
    s.index = indices[slot];
    s.label = ds->label(s.index);
    size_t bytes = 0;
    absl::Status st = ReadRecord(*ds, p->fields(), ws, s, &bytes);
    if (st.ok()) st = p->Run(0, p->num_stages(), s, ws);
    if (st.ok()) st = batch.Keep(slot, s);
    if (st.ok()) {
      batch.FinishOk(slot, s.label, RecordHash(s));
    } else {
      batch.FinishError(slot, SampleError{s.index, "", st});
    }
  }
  const std::vector<SampleError> errors = batch.Compact();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].index, 3);
  EXPECT_THAT(errors[0].status.message(), HasSubstr("has no member 'wav'"));
  ASSERT_TRUE(batch.Pad().ok());
  ASSERT_EQ(batch.num_fields(), 3);
  EXPECT_EQ(batch.size(), 3);
  EXPECT_EQ(batch.field_shape(0), Shape({3, 3, 32, 32}));
  EXPECT_EQ(batch.field_shape(2), Shape({3, 1, 400}));
  EXPECT_EQ(batch.field_bytes(1, 0), "{\"i\": 5}");
  EXPECT_EQ(batch.field_bytes(1, 2), "{\"i\": 0}");
  EXPECT_EQ(batch.bytes(), 3 * (3 * 32 * 32 * 4 + 400 * 4) + 3 * 8);
}

// A field whose lengths vary is padded on its own, with its lengths.
TEST(Records, RaggedFieldsArePaddedBesideFixedOnes) {
  TempDir dir;
  auto ds = OpenShard(WriteShard(dir));
  ASSERT_NE(ds, nullptr);
  auto p = MakePipeline(R"pb(
    stages {
      decode_audio {}
      field: "wav"
    }
    stages {
      downmix {}
      field: "wav"
    }
    stages {
      resample { rate: 16000 }
      field: "wav"
    }
    stages {
      decode {}
      field: "jpg"
    }
    stages {
      center_crop { size: 16 }
      field: "jpg"
    }
  )pb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->WhyNotBatchable(), "");
  Batch batch(p->OutputFields(), 2);
  const std::vector<int64_t> indices = {0, 2};
  batch.Reset(0, 0, indices);
  for (int64_t slot = 0; slot < 2; ++slot) {
    Workspace ws;
    Sample s;
    s.index = indices[slot];
    size_t bytes = 0;
    ASSERT_TRUE(ReadRecord(*ds, p->fields(), ws, s, &bytes).ok());
    ASSERT_TRUE(p->Run(0, p->num_stages(), s, ws).ok());
    ASSERT_TRUE(batch.Keep(slot, s).ok());
    batch.FinishOk(slot, s.label, RecordHash(s));
  }
  batch.Compact();
  ASSERT_TRUE(batch.Pad().ok());
  ASSERT_EQ(batch.num_fields(), 2);
  EXPECT_EQ(batch.field(1).key, "wav");
  EXPECT_TRUE(batch.field_ragged(1));
  EXPECT_THAT(batch.field_lengths(1), ::testing::ElementsAre(600, 900));  // 16 kHz in and out
  EXPECT_EQ(batch.field_shape(1), Shape({2, 1, 900}));
  EXPECT_EQ(batch.padding_bytes(), 300 * sizeof(float));
}

// A decode plans its region from the next stage of its own field, however
// many stages of other fields come between; what lies between is not
// cached.
TEST(Records, ADecodePlansForItsOwnFieldOnly) {
  auto p = MakePipeline(R"pb(
    stages {
      decode {}
      field: "jpg"
    }
    stages {
      decode_audio {}
      field: "wav"
    }
    stages {
      random_resized_crop { size: 8 }
      field: "jpg"
    }
  )pb");
  ASSERT_NE(p, nullptr);
  EXPECT_THAT(p->WhyNotDeterministic(1), HasSubstr("stage 0 (decode) decodes the region"));
  EXPECT_THAT(p->WhyNotDeterministic(2), HasSubstr("stage 0 (decode) decodes the region"));
  EXPECT_EQ(p->CacheBoundary(), 0);

  TempDir dir;
  auto ds = OpenShard(WriteShard(dir));
  ASSERT_NE(ds, nullptr);
  // The crop is another field's: the image decodes whole.
  auto q = MakePipeline(R"pb(
    stages {
      decode {}
      field: "jpg"
    }
    stages {
      decode {}
      field: "jpg;png"
    }
    stages {
      random_resized_crop { size: 8 }
      field: "jpg;png"
    }
  )pb");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->WhyNotDeterministic(1), "");
  Workspace ws;
  Sample s;
  size_t bytes = 0;
  ASSERT_TRUE(ReadRecord(*ds, q->fields(), ws, s, &bytes).ok());
  ASSERT_TRUE(q->Run(0, q->num_stages(), s, ws).ok());
  const StoredField* jpg = s.FindField("jpg");
  ASSERT_NE(jpg, nullptr);
  EXPECT_EQ(jpg->shape, Shape({36, 40, 3}));
  EXPECT_EQ(s.shape, Shape({8, 8, 3}));
}

TEST(Records, FieldNamesAreChecked) {
  for (const char* bad : {R"pb(stages {
                                 decode {}
                                 field: "a/b"
                               })pb",
                          R"pb(stages {
                                 decode {}
                                 field: "jpg"
                               }
                               carry: "jpg")pb",
                          R"pb(stages { decode {} }
                               carry: "")pb"}) {
    auto spec = LoadPipelineSpec(bad);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto p = Pipeline::Create(*spec, PipelineOptions());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Records, ForgedRecordsAreRefused) {
  auto p = MakePipeline(kRecordPipeline);
  ASSERT_NE(p, nullptr);
  // A field named twice.
  proto::SampleValue value;
  value.set_kind(proto::SampleValue::KIND_ENCODED);
  value.set_data("x");
  for (int i = 0; i < 2; ++i) {
    proto::NamedValue* f = value.add_fields();
    f->set_name("json");
    f->mutable_value()->set_kind(proto::SampleValue::KIND_ENCODED);
    f->mutable_value()->set_data("{}");
  }
  Workspace ws;
  Sample s;
  EXPECT_THAT(FromWire(value, ws, s).message(), HasSubstr("named twice"));
  // A field holding fields of its own, a name no pipeline may give, and
  // more fields than a record has.
  {
    proto::SampleValue nested = value;
    nested.mutable_fields(0)->mutable_value()->add_fields()->set_name("x");
    EXPECT_THAT(FromWire(nested, ws, s).message(), HasSubstr("holds fields of its own"));
    proto::SampleValue bad_name = value;
    bad_name.mutable_fields(0)->set_name("../etc");
    EXPECT_THAT(FromWire(bad_name, ws, s).message(), HasSubstr("is not a field name"));
    proto::SampleValue many = value;
    many.clear_fields();
    for (int i = 0; i <= kMaxRecordFields; ++i) {
      proto::NamedValue* f = many.add_fields();
      f->set_name(absl::StrCat("f", i));
      f->mutable_value()->set_kind(proto::SampleValue::KIND_ENCODED);
    }
    EXPECT_THAT(FromWire(many, ws, s).message(), HasSubstr("a record has at most"));
  }
  // A record without its image: refused before a stage reads it.
  value.mutable_fields()->RemoveLast();
  ASSERT_TRUE(FromWire(value, ws, s).ok());
  const absl::Status st = p->Run(0, p->num_stages(), s, ws);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("fields"));
}

// A shard of a thousand kinds of member: extensions past the table's limit
// are not readable as fields, with a warning, and the index stays bounded.
TEST(Records, MemberExtensionsAreBounded) {
  TempDir dir;
  TarWriter w;
  ASSERT_TRUE(w.Open(dir.Join("many.tar")).ok());
  const std::vector<uint8_t> jpeg = Jpeg(8, 8);
  ASSERT_TRUE(w.Add("k.jpg", jpeg.data(), jpeg.size()).ok());
  for (int i = 0; i < 4200; ++i) {
    ASSERT_TRUE(w.Add(absl::StrCat("k.e", i), "x", 1).ok());
  }
  ASSERT_TRUE(w.Close().ok());
  auto ds = OpenShard(dir.Join("many.tar"));
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 1);
  ASSERT_EQ(ds->index_warnings().size(), 1u);
  EXPECT_THAT(ds->index_warnings()[0], HasSubstr("member extensions"));
  Buffer b;
  size_t n = 0;
  EXPECT_TRUE(ds->ReadMember(0, "e10", &b, &n).ok());
  EXPECT_EQ(ds->ReadMember(0, "e4199", &b, &n).code(), absl::StatusCode::kNotFound);
}

TEST(Records, OneFieldDatasetsHaveNoMembers) {
  TempDir dir;
  WriteFile(dir.Join("a/x.jpg"), Jpeg(16, 16));
  proto::DatasetSpec spec;
  spec.set_path(dir.path());
  auto ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_FALSE((*ds)->has_members());
  Buffer b;
  size_t n = 0;
  const absl::Status st = (*ds)->ReadMember(0, "wav", &b, &n);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("no member 'wav'"));
}

// A sample of one field hashes as it always has.
TEST(Records, OneFieldHashIsSampleHash) {
  const uint8_t data[] = {1, 2, 3};
  Sample s;
  s.index = 9;
  s.label = 2;
  s.data = const_cast<uint8_t*>(data);
  s.size = sizeof(data);
  EXPECT_EQ(RecordHash(s), SampleHash(9, 2, data, sizeof(data)));
  s.StoreField(StoredField{"txt", ValueKind::kEncoded, {1}, {}, 0, "a"});
  EXPECT_NE(RecordHash(s), SampleHash(9, 2, data, sizeof(data)));
}

}  // namespace
}  // namespace prepflow
